package idemkit_test

// Run: go test -run '^$' -bench 'Memory|NewKey|Guard_' -benchmem ./idemkit
// `make bench` prints these as ratios (see bench/README.md).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/benchpair"
)

const benchKeys = 1 << 14

func benchKeyPool() []idemkit.Key { return benchpair.Keys(benchKeys) }

var benchBody = benchpair.Body

// mapBaseline is the hand-written equivalent of a MemoryStore claim and
// finish: a mutex-guarded map, the same record fields, the same expiry rule.
type mapBaseline struct {
	mu sync.Mutex
	m  map[string]*baseRecord
}

type baseRecord struct {
	state      uint8
	token      int64
	attempt    int
	fp         string
	leaseUntil time.Time
	expiresAt  time.Time
	body       []byte
	writeID    string
}

func (b *mapBaseline) do(key, fp string, token int64, work func() ([]byte, string)) ([]byte, bool) {
	now := time.Now()
	b.mu.Lock()
	r := b.m[key]
	if r != nil && (now.Before(r.expiresAt) || (r.state == 1 && now.Before(r.leaseUntil))) {
		body := append([]byte(nil), r.body...)
		b.mu.Unlock()
		return body, true
	}
	r = &baseRecord{state: 1, token: token, attempt: 1, fp: fp, leaseUntil: now.Add(2 * time.Minute), expiresAt: now.Add(10 * time.Minute)}
	b.m[key] = r
	b.mu.Unlock()

	body, writeID := work()

	b.mu.Lock()
	if r := b.m[key]; r != nil && r.token == token && r.state == 1 {
		r.state = 2
		r.body = append([]byte(nil), body...)
		r.writeID = writeID
	}
	b.mu.Unlock()
	return body, false
}

// BenchmarkMemoryStore compares Guard.Do on a MemoryStore (claim, work,
// finish on a fresh key) with the hand-written map doing the same, with 1 and
// 32 concurrent callers, interleaved (internal/testing/benchpair). Every call claims
// a fresh key: when the key pool runs out both sides move to an empty store,
// so map growth is paid alike. Read throughput-ratio (guard over baseline).
func BenchmarkMemoryStore(b *testing.B) {
	keys := benchKeyPool()
	work := func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: benchBody, WriteID: "re_123"}, nil
	}
	ctx := context.Background()
	w := func() ([]byte, string) { return benchBody, "re_123" }
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			guards := newGenerations(func() *idemkit.Guard {
				g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
				if err != nil {
					panic(err)
				}
				return g
			})
			maps := newGenerations(func() *mapBaseline { return &mapBaseline{m: make(map[string]*baseRecord)} })
			guardOp := func(i int) error {
				res, err := guards.get(i).Do(ctx, keys[i%benchKeys], work)
				if err == nil && (res.Outcome == idemkit.OutcomeReplayed) {
					err = errors.New("replayed a fresh key")
				}
				return err
			}
			baseOp := func(i int) error {
				k := keys[i%benchKeys]
				if _, replay := maps.get(i).do(k.ID(), k.ArgsHash(), int64(i+1), w); replay {
					return errors.New("baseline replayed a fresh key")
				}
				return nil
			}
			benchpair.Run(b, callers, 256, guardOp, baseOp)
		})
	}
}

// BenchmarkNewKey measures key derivation from raw JSON arguments: as
// encoding/json writes them (sorted, compact: already canonical, the common
// case in MCP servers), and in an arbitrary client's order and spelling.
func BenchmarkNewKey(b *testing.B) {
	for name, args := range map[string]string{
		"canonical":    `{"amount_cents":1999,"currency":"EUR","idempotency_key":"3f2a9c","order_id":"o-123456","reason":"damaged in transit"}`,
		"noncanonical": `{"order_id": "o-123456", "amount_cents": 1999.0, "currency": "EUR", "reason": "damaged in transit", "idempotency_key": "3f2a9c"}`,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := idemkit.NewKey("user-42", "issue_refund", []byte(args), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// generations hands out one store per pass over the key pool, so that every
// call of a benchmark claims a key its store has not seen. Stores two passes
// old are dropped to bound memory; a straggler that still asks for one gets
// a fresh store, where its key is fresh too.
type generations[T any] struct {
	make  func() T
	slots [4096]atomic.Pointer[T]
}

func newGenerations[T any](mk func() T) *generations[T] {
	return &generations[T]{make: mk}
}

func (g *generations[T]) get(i int) T {
	gen := i / benchKeys
	slot := &g.slots[gen%len(g.slots)]
	if p := slot.Load(); p != nil {
		return *p
	}
	v := g.make()
	if !slot.CompareAndSwap(nil, &v) {
		return *slot.Load()
	}
	if gen >= 2 {
		g.slots[(gen-2)%len(g.slots)].Store(nil)
	}
	return v
}

// largeNumberArray is a 1 MB JSON array of numbers in a client's spelling
// (spaces, exponents, trailing zeros), so that NewKey must canonicalise it.
func largeNumberArray() []byte {
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; b.Len() < 1_000_000-40; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "%d.50", i)
		case 1:
			fmt.Fprintf(&b, "%de-3", i)
		case 2:
			fmt.Fprintf(&b, "%d", i*7919)
		default:
			fmt.Fprintf(&b, "-%d.125E2", i)
		}
	}
	b.WriteString("]")
	return b.Bytes()
}

// BenchmarkNewKey_LargeNumberArray measures the memory of key derivation
// for a 1 MB array of numbers, beside the JCS library canonicalising the
// same input in the same run. alloc-x-input is bytes allocated per byte of
// input (the target is at most 4).
func BenchmarkNewKey_LargeNumberArray(b *testing.B) {
	doc := largeNumberArray()
	opts := &idemkit.KeyOptions{MaxArgsBytes: 2 << 20}
	for _, side := range []struct {
		name string
		fn   func() error
	}{
		{"idemkit", func() error { _, err := idemkit.NewKey("s", "t", doc, opts); return err }},
		{"jcs", func() error { _, err := jcs.Transform(doc); return err }},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for b.Loop() {
				if err := side.fn(); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/float64(len(doc)), "alloc-x-input")
		})
	}
}

// interfaceOnly hides a *MemoryStore behind the Store interface, so that
// the Guard takes its general path: requests and results copied through
// the interface, and a finish bounded by a timeout context.
type interfaceOnly struct{ idemstore.Store }

// guardPair benchmarks Guard.Do on a fresh key of a MemoryStore with two
// Guards side by side (internal/testing/benchpair), with 1 and 32 callers:
// throughput-ratio is candidate over baseline.
func guardPair(b *testing.B, candidate, baseline func() *idemkit.Guard) {
	keys := benchKeyPool()
	ctx := context.Background()
	work := func(ctx context.Context) (idemkit.Response, error) {
		if idemkit.CallFromContext(ctx) == nil {
			return idemkit.Response{}, errors.New("the work's context has no Call")
		}
		return idemkit.Response{Body: benchBody, WriteID: "re_123"}, nil
	}
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			op := func(gs *generations[*idemkit.Guard]) benchpair.Op {
				return func(i int) error {
					res, err := gs.get(i).Do(ctx, keys[i%benchKeys], work)
					if err == nil && (res.Outcome == idemkit.OutcomeReplayed) {
						err = errors.New("replayed a fresh key")
					}
					return err
				}
			}
			benchpair.Run(b, callers, 256, op(newGenerations(candidate)), op(newGenerations(baseline)))
		})
	}
}

func mustGuard(s idemstore.Store) *idemkit.Guard {
	g, err := idemkit.NewGuard(s, nil)
	if err != nil {
		panic(err)
	}
	return g
}

// BenchmarkGuard_MemoryFastPath justifies the memory-store fast path
// (Guard.setStore): the Guard calling a *MemoryStore directly, requests
// and results by pointer and no finish timeout (candidate), against the
// same store behind the Store interface (baseline).
func BenchmarkGuard_MemoryFastPath(b *testing.B) {
	guardPair(b,
		func() *idemkit.Guard { return mustGuard(&idemkit.MemoryStore{}) },
		func() *idemkit.Guard { return mustGuard(interfaceOnly{&idemkit.MemoryStore{}}) })
}

// BenchmarkGuard_HandRolledContexts justifies the attempt (guard.go): one
// allocation that is the work's context, carrying the Call, and, seen as a
// detachedAttempt, the finish's (candidate), against
// context.WithValue and context.WithoutCancel (baseline).
func BenchmarkGuard_HandRolledContexts(b *testing.B) {
	guardPair(b,
		func() *idemkit.Guard { return mustGuard(&idemkit.MemoryStore{}) },
		func() *idemkit.Guard { g := mustGuard(&idemkit.MemoryStore{}); idemkit.UsePlainContexts(g); return g })
}
