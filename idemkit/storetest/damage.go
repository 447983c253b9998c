package storetest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// Damage names a way a stored record is damaged (or rewritten) behind the
// store's back, as Config.Damage applies it with the store's raw access.
type Damage string

// Kinds of damage. Config.Damage applies each to the record of a key
// whose call completed.
const (
	// DamageBody overwrites the stored body, inline or stored apart, with
	// other bytes of the same length.
	DamageBody Damage = "body"
	// DamageWriteID overwrites the write ID with another one.
	DamageWriteID Damage = "write_id"
	// DamageIsError flips the tool-error flag.
	DamageIsError Damage = "is_error"
	// DamageStorage sets the storage kind to 7, a kind that does not exist
	// (bypassing a CHECK constraint if the schema has one).
	DamageStorage Damage = "storage"
	// DamageDropBody deletes the body stored apart (of a record whose body
	// is StorageExternal).
	DamageDropBody Damage = "drop_body"
	// DamageChecksum overwrites the outcome's stored checksum.
	DamageChecksum Damage = "checksum"
	// DamageUncheck removes the checksum, as on a record written before
	// the store kept checksums. It is not damage: the record must replay
	// as it is.
	DamageUncheck Damage = "uncheck"
	// DamageRewrite rewrites the record's outcome as a store that keeps no
	// checksum would (an older version of the store on a replica not yet
	// upgraded, after it took the record over): a new token, the body
	// RewrittenBody inline and the write ID RewrittenWriteID, its checksum
	// left as it was. It is not damage: the record must replay the
	// rewritten outcome.
	DamageRewrite Damage = "rewrite"
)

// The outcome DamageRewrite writes.
const (
	RewrittenBody    = `{"rewritten":true}`
	RewrittenWriteID = "w-rewritten"
)

// The conformance tests of damaged records: every store that keeps its
// records outside the process keeps a checksum with each completed
// outcome, and the Guard refuses a record that fails it, or that cannot be
// read at all, with a *RecordDamagedError: never replayed as wrong or empty
// bytes, never run again (the call ran: treating the record as absent
// would run a refund twice), logged, and the same answer on every retry.
func (s *suite) damagedRecords(t *testing.T) {
	if s.cfg.Damage == nil {
		t.Skip("storetest: Config.Damage is nil: the store gives the suite no raw access to its records")
	}
	body := []byte(`{"content":[{"type":"text","text":"refunded 250 cents on ord_1012"}]}`)
	large := bytes.Repeat([]byte(`{"line":"refunded"},`), 4<<10) // over the 64 KiB inline limit
	for _, tc := range []struct {
		name   string
		damage Damage
		body   []byte
	}{
		{"InlineBodyOverwritten", DamageBody, body},
		{"ExternalBodyOverwritten", DamageBody, large},
		{"WriteIDOverwritten", DamageWriteID, body},
		{"ErrorFlagFlipped", DamageIsError, body},
		{"StorageKindOutOfRange", DamageStorage, body},
		{"ExternalStorageKindOutOfRange", DamageStorage, large},
		{"ExternalBodyDeleted", DamageDropBody, large},
		{"ChecksumOverwritten", DamageChecksum, body},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logBuffer
			store := s.cfg.NewStore(t)
			clock := NewClock()
			g := s.guard(t, store, &idemkit.Config{Now: clock.Now, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			k := key(t, "alice", "refund", `{"order_id":"ord_1012","amount_cents":250}`)
			var runs atomic.Int64
			work := func(context.Context) (idemkit.Response, error) {
				runs.Add(1)
				return idemkit.Response{Body: bytes.Clone(tc.body), WriteID: "re_1012"}, nil
			}
			if res := mustDo(t, g, k, work); res.Outcome != idemkit.OutcomeExecuted {
				t.Fatalf("first call: %s", res.Outcome)
			}
			s.cfg.Damage(t, store, k.ID(), tc.damage)

			for i := range 3 {
				res, err := g.Do(ctx(t), k, work)
				var de *idemkit.RecordDamagedError
				if !errors.As(err, &de) || !errors.Is(err, idemkit.ErrRecordDamaged) {
					t.Fatalf("duplicate %d of a record with %s damaged: result %q (outcome %s), err %v; want a *RecordDamagedError",
						i, tc.damage, res.Body, res.Outcome, err)
				}
				if errors.Is(err, idemkit.ErrStore) || res.Body != nil || res.Outcome != "" {
					t.Fatalf("duplicate %d: err %v (matches ErrStore: %v), result %+v; want only the damage, and no result",
						i, err, errors.Is(err, idemkit.ErrStore), res)
				}
				if de.Tool != "refund" || de.KeyHash != k.Hash() || de.Attempt > 1 || de.Reason == "" {
					t.Fatalf("RecordDamagedError = %+v, want tool refund, key hash %s, attempt 1 (or 0: unknown) and a reason", *de, k.Hash())
				}
				msg := err.Error()
				for _, want := range []string{"already ran", "cannot be read", "Do not call it again"} {
					if !strings.Contains(msg, want) {
						t.Errorf("refusal text %q lacks %q", msg, want)
					}
				}
				if strings.Contains(strings.ToLower(msg), "nothing was done") {
					t.Errorf("refusal text %q says nothing was done, but the call ran", msg)
				}
				// Still refused late in the window: a damaged record is
				// never treated as absent.
				clock.Advance(4 * time.Minute)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the work ran %d times, want 1: a damaged record must not be run again", n)
			}
			if _, err := g.Lookup(ctx(t), k); !errors.Is(err, idemkit.ErrRecordDamaged) {
				t.Fatalf("Guard.Lookup of the damaged record: %v, want ErrRecordDamaged", err)
			}
			if n := logs.count(`"idemkit.key.hash":"` + k.Hash() + `"`); n < 3 {
				t.Fatalf("%d log records name the damaged record's key hash, want one per refusal (3 or more):\n%s", n, logs.String())
			}
		})
	}

	// A record without a checksum (written before the store kept them)
	// replays as it is; one rewritten by a store without checksums replays
	// its new outcome.
	for _, tc := range []struct {
		name        string
		damage      Damage
		body        []byte
		wantBody    string
		wantWriteID string
	}{
		{"UncheckedInline", DamageUncheck, body, string(body), "re_1012"},
		{"UncheckedExternal", DamageUncheck, large, string(large), "re_1012"},
		{"RewrittenWithoutChecksum", DamageRewrite, body, RewrittenBody, RewrittenWriteID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := s.setup(t, idemkit.Config{})
			store := g.Store()
			k := key(t, "alice", "refund", `{"order_id":"ord_1013","amount_cents":250}`)
			var runs atomic.Int64
			work := func(context.Context) (idemkit.Response, error) {
				runs.Add(1)
				return idemkit.Response{Body: bytes.Clone(tc.body), WriteID: "re_1012"}, nil
			}
			mustDo(t, g, k, work)
			s.cfg.Damage(t, store, k.ID(), tc.damage)
			res := mustDo(t, g, k, work)
			if res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != tc.wantBody || res.WriteID != tc.wantWriteID {
				t.Fatalf("duplicate after %s: outcome %s, write ID %q, %d-byte body; want a replay of %d bytes with write ID %q",
					tc.damage, res.Outcome, res.WriteID, len(res.Body), len(tc.wantBody), tc.wantWriteID)
			}
			if rec, err := g.Lookup(ctx(t), k); err != nil || string(rec.Body) != tc.wantBody || rec.Checksum != nil {
				t.Fatalf("Guard.Lookup after %s: %d-byte body, checksum %x, %v; want the body and no checksum", tc.damage, len(rec.Body), rec.Checksum, err)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the work ran %d times, want 1", n)
			}
		})
	}

	// An intact record carries its checksum, and a new outcome of the key
	// (after the window) a new one.
	t.Run("IntactRecordsCarryChecksums", func(t *testing.T) {
		g, clock := s.setup(t, idemkit.Config{})
		store := g.Store()
		k := key(t, "alice", "refund", `{"order_id":"ord_1014","amount_cents":250}`)
		var c counter
		mustDo(t, g, k, c.work("first"))
		rec, err := g.Lookup(ctx(t), k)
		if err != nil || len(rec.Checksum) == 0 {
			t.Fatalf("Guard.Lookup of a completed record: checksum %x, %v; want a checksum", rec.Checksum, err)
		}
		cr, err := store.Claim(ctx(t), idemstore.ClaimRequest{Key: k.ID(), Tool: "refund", Token: 991, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()})
		if err != nil || cr.Status != idemstore.ClaimCompleted || !bytes.Equal(cr.Checksum, rec.Checksum) {
			t.Fatalf("claim of the completed record: %s, checksum %x, %v; want completed with checksum %x", cr.Status, cr.Checksum, err, rec.Checksum)
		}
		clock.Advance(11 * time.Minute)
		if r := mustDo(t, g, k, c.work("second")); r.Outcome != idemkit.OutcomeExecuted {
			t.Fatalf("after the window: %s, want executed", r.Outcome)
		}
		again, err := g.Lookup(ctx(t), k)
		if err != nil || len(again.Checksum) == 0 || bytes.Equal(again.Checksum, rec.Checksum) || string(again.Body) != "second" {
			t.Fatalf("the key's next outcome: body %q, checksum %x (the first's was %x), %v; want its own checksum", again.Body, again.Checksum, rec.Checksum, err)
		}
		if r := mustDo(t, g, k, mustNotRun(t)); r.Outcome != idemkit.OutcomeReplayed || string(r.Body) != "second" {
			t.Fatalf("replay of the next outcome: %+v", r)
		}
	})
}

// logBuffer collects log output; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) count(s string) int { return strings.Count(l.String(), s) }
