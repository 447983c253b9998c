package refunds

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mark3labs/mcp-go/client"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
)

// The desk's load benchmark (make bench): the refund desk over Streamable
// HTTP on loopback, driven by concurrent mcp-go clients for a fixed time
// per phase: distinct refunds, 10% of calls exact duplicates of the
// client's previous call, one order in four paid through the slow
// gateway. In one run, interleaved in rounds: the desk with idemkit
// (protected), the same desk without it (bare: the same two phases, the
// payment outside any transaction, then a short transaction), both again
// with fast orders only, and the ceiling: the same store's Guard.Do at the
// same concurrency with the same simulated work (the gateway's latency).
var (
	deskPhase  = flag.Duration("desk.phase", 3*time.Second, "length of one phase of BenchmarkDesk")
	deskRounds = flag.Int("desk.rounds", 3, "rounds of BenchmarkDesk (each runs every side once, in rotating order)")
	deskSoak   = flag.Duration("desk.soak", 0, "length of BenchmarkDeskSoak (0: skipped)")
	deskSlow   = flag.Duration("desk.slow", DefaultSlowLatency, "the slow gateway's latency in the desk benchmarks")
	deskFast   = flag.Duration("desk.fast", DefaultFastLatency, "the fast gateway's latency in the desk benchmarks")
	deskSides  = flag.String("desk.sides", "", "comma-separated sides of BenchmarkDesk to run, for profiling one (default: all)")
)

// Seeded orders of the benchmarks: prefixMixed orders, every fourth one
// slow, and prefixFast orders, all fast, each of 1,000.00.
const (
	prefixMixed     = "bm_"
	prefixFast      = "bf_"
	benchOrders     = 40000
	benchOrderCents = 100000
	benchAmount     = 100
)

// seedBenchOrders adds n orders named prefix + a 7-digit number; with
// slowEvery > 0 every slowEvery-th one is paid through the slow gateway.
func (d *DB) seedBenchOrders(ctx context.Context, prefix string, n, slowEvery int) error {
	gw := func(i int) string {
		if slowEvery > 0 && i%slowEvery == slowEvery-1 {
			return SlowGateway
		}
		return FastGateway
	}
	if d.pg != nil {
		_, err := d.pg.Exec(ctx, `INSERT INTO orders (id, customer, total_cents, gateway)
			SELECT $1 || lpad(i::text, 7, '0'), 'alice', $2, CASE WHEN $4 > 0 AND i % $4 = $4 - 1 THEN $5 ELSE $6 END
			FROM generate_series(0, $3 - 1) AS i ON CONFLICT (id) DO NOTHING`, prefix, benchOrderCents, n, slowEvery, SlowGateway, FastGateway)
		return err
	}
	tx, err := d.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT INTO orders (id, customer, total_cents, gateway) VALUES (?, 'alice', ?, ?) ON CONFLICT(id) DO NOTHING`)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := st.ExecContext(ctx, fmt.Sprintf("%s%07d", prefix, i), benchOrderCents, gw(i)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// load is what a phase offers: which orders, how many clients.
type load struct {
	prefix  string
	slowOf4 bool // one order in four slow (the mixed orders)
	clients int
}

// orderPicker hands out distinct refunds: the next order, and after the
// last one the first again with another amount (still a distinct call).
type orderPicker struct{ next atomic.Int64 }

func (p *orderPicker) pick(prefix string) (order string, amount int64, slow bool) {
	n := p.next.Add(1) - 1
	i, wrap := n%benchOrders, n/benchOrders
	return fmt.Sprintf("%s%07d", prefix, i), benchAmount + wrap, prefix == prefixMixed && i%4 == 3
}

// phaseStats are one phase's measurements.
type phaseStats struct {
	elapsed       time.Duration
	calls, failed int
	lat, fast     []time.Duration // every call; first calls of fast orders
	reads         []time.Duration
	firstFailure  error
}

func (s *phaseStats) add(o *phaseStats) {
	s.elapsed += o.elapsed
	s.calls += o.calls
	s.failed += o.failed
	s.lat = append(s.lat, o.lat...)
	s.fast = append(s.fast, o.fast...)
	s.reads = append(s.reads, o.reads...)
	if s.firstFailure == nil {
		s.firstFailure = o.firstFailure
	}
}

func (s *phaseStats) rate() float64 { return float64(s.calls) / s.elapsed.Seconds() }

func quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / float64(time.Millisecond)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// side is one desk under load, with its clients and its reader.
type side struct {
	rig     *deskRig
	clients []*client.Client
	reader  *client.Client
	orders  map[string]*orderPicker // by prefix
}

func newSide(b *testing.B, mode string, clients int) *side {
	b.Helper()
	r := startDeskMode(b, mode, deskOptions{fast: *deskFast, slow: *deskSlow, pgConns: 16})
	ctx := context.Background()
	for _, p := range []struct {
		prefix string
		slow   int
	}{{prefixMixed, 4}, {prefixFast, 0}} {
		if err := r.db.seedBenchOrders(ctx, p.prefix, benchOrders, p.slow); err != nil {
			b.Fatal(err)
		}
	}
	s := &side{rig: r, orders: map[string]*orderPicker{prefixMixed: {}, prefixFast: {}}}
	for range clients {
		s.clients = append(s.clients, deskClient(b, r.url))
	}
	s.reader = deskClient(b, r.url)
	return s
}

// run drives the side for d with l's clients, each calling issue_refund in
// a loop (10% exact duplicates of its previous call), and the reader
// calling get_refund_status on a refunded order meanwhile.
func (s *side) run(d time.Duration, l load, seed uint64) *phaseStats {
	var (
		mu    sync.Mutex
		st    = &phaseStats{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		last  atomic.Value // an order with a refund, for the reader
		start = time.Now()
	)
	last.Store("ord_1001")
	for ci := range l.clients {
		c := s.clients[ci]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			var prev map[string]any
			for {
				select {
				case <-stop:
					return
				default:
				}
				args, dup, slow := prev, true, false
				if prev == nil || rng.IntN(10) != 0 {
					order, amount, isSlow := s.orders[l.prefix].pick(l.prefix)
					args, dup, slow = map[string]any{"order_id": order, "amount_cents": amount}, false, isSlow
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				res, err := callTool(ctx, c, ToolIssueRefund, args)
				lat := time.Since(t0)
				cancel()
				if err == nil && res.IsError {
					err = errors.New(resultText(res))
				}
				mu.Lock()
				if err != nil {
					st.failed++
					if st.firstFailure == nil {
						st.firstFailure = err
					}
				} else {
					st.calls++
					st.lat = append(st.lat, lat)
					if !dup && !slow {
						st.fast = append(st.fast, lat)
					}
				}
				mu.Unlock()
				if err == nil {
					last.Store(args["order_id"].(string))
				}
				prev = args
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t0 := time.Now()
			res, err := callTool(ctx, s.reader, ToolRefundStatus, map[string]any{"order_id": last.Load().(string)})
			lat := time.Since(t0)
			cancel()
			mu.Lock()
			if err == nil && !res.IsError {
				st.reads = append(st.reads, lat)
			} else if st.firstFailure == nil {
				st.firstFailure = fmt.Errorf("get_refund_status: %v %v", err, res)
			}
			mu.Unlock()
		}
	})
	time.Sleep(d)
	close(stop)
	wg.Wait()
	st.elapsed = time.Since(start) // the calls in flight at the stop are counted
	return st
}

// ceiling is the same store's Guard.Do with the same simulated work.
type ceiling struct {
	guard  *idemkit.Guard
	orders orderPicker
}

func newCeiling(b *testing.B, store string) *ceiling {
	b.Helper()
	ctx := context.Background()
	var s idemstore.Store
	switch store {
	case modeSQLite:
		st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "ceiling.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		s = st
	case modePostgres:
		schema := pgtest.Schema(b, pgtest.Pool(b))
		cfg, err := pgxpool.ParseConfig(pgtest.DSN(b))
		if err != nil {
			b.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(pool.Close)
		st, err := pgstore.New(pool, nil)
		if err == nil {
			err = st.Migrate(ctx)
		}
		if err != nil {
			b.Fatal(err)
		}
		s = st
	}
	g, err := idemkit.NewGuard(s, nil)
	if err != nil {
		b.Fatal(err)
	}
	return &ceiling{guard: g}
}

func (c *ceiling) run(d time.Duration, l load, seed uint64) *phaseStats {
	var (
		mu    sync.Mutex
		st    = &phaseStats{}
		wg    sync.WaitGroup
		stop  = make(chan struct{})
		start = time.Now()
	)
	for ci := range l.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			var prev idemkit.Key
			var prevSlow bool
			for {
				select {
				case <-stop:
					return
				default:
				}
				key, slow := prev, prevSlow
				if prev.IsZero() || rng.IntN(10) != 0 {
					order, amount, isSlow := c.orders.pick(l.prefix)
					var err error
					if key, err = idemkit.NewKey("user:alice", ToolIssueRefund, fmt.Appendf(nil, `{"order_id":%q,"amount_cents":%d}`, order, amount), nil); err != nil {
						panic(err)
					}
					slow = isSlow
				}
				latency := *deskFast
				if slow {
					latency = *deskSlow
				}
				t0 := time.Now()
				_, err := c.guard.Do(context.Background(), key, func(ctx context.Context) (idemkit.Response, error) {
					time.Sleep(latency)
					return idemkit.Response{Body: []byte(`{"content":[{"type":"text","text":"Refunded"}]}`), WriteID: "re_x"}, nil
				})
				lat := time.Since(t0)
				mu.Lock()
				if err != nil {
					st.failed++
					if st.firstFailure == nil {
						st.firstFailure = err
					}
				} else {
					st.calls++
					st.lat = append(st.lat, lat)
				}
				mu.Unlock()
				prev, prevSlow = key, slow
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	st.elapsed = time.Since(start)
	return st
}

// loadAverage returns the 1-minute load average, or -1.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return -1
	}
	return v
}

func BenchmarkDesk(b *testing.B) {
	for _, store := range []string{modeSQLite, modePostgres} {
		for _, clients := range []int{20, 50} {
			b.Run(fmt.Sprintf("store=%s/clients=%d", store, clients), func(b *testing.B) {
				benchDesk(b, store, clients)
			})
		}
	}
}

func benchDesk(b *testing.B, store string, clients int) {
	bare := modeBareSQLite
	if store == modePostgres {
		bare = modeBarePG
	}
	load0 := loadAverage()
	desk, plain, ceil := newSide(b, store, clients), newSide(b, bare, clients), newCeiling(b, store)
	mixed := load{prefix: prefixMixed, slowOf4: true, clients: clients}
	fast := load{prefix: prefixFast, clients: clients}
	type sideRun struct {
		name string
		run  func(seed uint64) *phaseStats
	}
	sides := []sideRun{
		{"desk", func(seed uint64) *phaseStats { return desk.run(*deskPhase, mixed, seed) }},
		{"bare", func(seed uint64) *phaseStats { return plain.run(*deskPhase, mixed, seed) }},
		{"ceiling", func(seed uint64) *phaseStats { return ceil.run(*deskPhase, mixed, seed) }},
		{"desk-fast", func(seed uint64) *phaseStats { return desk.run(*deskPhase, fast, seed) }},
		{"bare-fast", func(seed uint64) *phaseStats { return plain.run(*deskPhase, fast, seed) }},
		{"ceiling-fast", func(seed uint64) *phaseStats { return ceil.run(*deskPhase, fast, seed) }},
	}
	if *deskSides != "" {
		var only []sideRun
		for _, sr := range sides {
			if slices.Contains(strings.Split(*deskSides, ","), sr.name) {
				only = append(only, sr)
			}
		}
		sides = only
	}
	total := map[string]*phaseStats{}
	rounds := map[string][]*phaseStats{}
	b.ResetTimer()
	for round := range *deskRounds {
		for i := range sides {
			sr := sides[(i+round)%len(sides)] // rotate who goes first
			st := sr.run(uint64(round*len(sides) + i))
			if total[sr.name] == nil {
				total[sr.name] = &phaseStats{}
			}
			total[sr.name].add(st)
			rounds[sr.name] = append(rounds[sr.name], st)
		}
	}
	b.StopTimer()
	for name, st := range total {
		if st.failed > 0 || st.firstFailure != nil {
			b.Errorf("%s: %d calls failed; first: %v", name, st.failed, st.firstFailure)
		}
	}
	perRound := func(f func(i int) float64) float64 {
		var v []float64
		for i := range *deskRounds {
			v = append(v, f(i))
		}
		return median(v)
	}
	ratio := func(a, c string) float64 {
		return perRound(func(i int) float64 { return rounds[a][i].rate() / rounds[c][i].rate() })
	}
	slowdown := func(mixedSide, fastSide string) float64 {
		return perRound(func(i int) float64 {
			return quantile(rounds[mixedSide][i].fast, 0.5) / quantile(rounds[fastSide][i].fast, 0.5)
		})
	}
	if *deskSides != "" {
		for name, st := range total {
			b.ReportMetric(st.rate(), name+"-calls/s")
			b.ReportMetric(quantile(st.lat, 0.5), name+"-p50-ms")
		}
		return
	}
	d, p, c := total["desk"], total["bare"], total["ceiling"]
	b.ReportMetric(d.rate(), "desk-calls/s")
	b.ReportMetric(p.rate(), "bare-calls/s")
	b.ReportMetric(c.rate(), "ceiling-calls/s")
	b.ReportMetric(ratio("desk", "bare"), "throughput-ratio")
	b.ReportMetric(ratio("desk", "ceiling"), "ceiling-ratio")
	b.ReportMetric(ratio("bare", "ceiling"), "bare-ceiling-ratio")
	b.ReportMetric(quantile(d.lat, 0.5), "p50-ms")
	b.ReportMetric(quantile(d.lat, 0.99), "p99-ms")
	b.ReportMetric(quantile(p.lat, 0.5), "bare-p50-ms")
	b.ReportMetric(quantile(p.lat, 0.99), "bare-p99-ms")
	b.ReportMetric(quantile(c.lat, 0.5), "ceiling-p50-ms")
	b.ReportMetric(quantile(d.fast, 0.5), "fast-p50-ms")
	b.ReportMetric(quantile(total["desk-fast"].fast, 0.5), "fast-alone-p50-ms")
	b.ReportMetric(slowdown("desk", "desk-fast"), "fast-slowdown")
	b.ReportMetric(quantile(p.fast, 0.5), "bare-fast-p50-ms")
	b.ReportMetric(quantile(total["bare-fast"].fast, 0.5), "bare-fast-alone-p50-ms")
	b.ReportMetric(slowdown("bare", "bare-fast"), "bare-fast-slowdown")
	b.ReportMetric(total["desk-fast"].rate(), "desk-fast-calls/s")
	b.ReportMetric(total["bare-fast"].rate(), "bare-fast-calls/s")
	b.ReportMetric(total["ceiling-fast"].rate(), "ceiling-fast-calls/s")
	b.ReportMetric(ratio("desk-fast", "bare-fast"), "fast-throughput-ratio")
	b.ReportMetric(ratio("desk-fast", "ceiling-fast"), "fast-ceiling-ratio")
	b.ReportMetric(quantile(d.reads, 0.5), "read-p50-ms")
	b.ReportMetric(quantile(d.reads, 0.99), "read-p99-ms")
	b.ReportMetric(quantile(p.reads, 0.5), "bare-read-p50-ms")
	b.ReportMetric(float64(d.failed+p.failed+c.failed), "failed-calls")
	b.ReportMetric(max(load0, loadAverage()), "loadavg")
}

// BenchmarkDeskConnections opens 500 client connections at once (each
// initializes its MCP session, then calls issue_refund once, one order in
// four slow), protected and bare: every one must finish within the
// client's 30-second timeout.
func BenchmarkDeskConnections(b *testing.B) {
	const conns = 500
	for _, store := range []string{modeSQLite, modePostgres} {
		b.Run("store="+store, func(b *testing.B) {
			bare := modeBareSQLite
			if store == modePostgres {
				bare = modeBarePG
			}
			load0 := loadAverage()
			for _, mode := range []string{store, bare} {
				r := startDeskMode(b, mode, deskOptions{fast: *deskFast, slow: *deskSlow, pgConns: 16})
				if err := r.db.seedBenchOrders(context.Background(), prefixMixed, conns, 4); err != nil {
					b.Fatal(err)
				}
				var (
					wg     sync.WaitGroup
					mu     sync.Mutex
					lat    []time.Duration
					failed int
					first  error
					start  = time.Now()
				)
				for i := range conns {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						t0 := time.Now()
						err := func() error {
							c, err := client.NewStreamableHttpClient(r.url, transportAlice()...)
							if err != nil {
								return err
							}
							defer c.Close()
							if err := c.Start(ctx); err != nil {
								return err
							}
							if _, err := c.Initialize(ctx, initRequest()); err != nil {
								return err
							}
							res, err := callTool(ctx, c, ToolIssueRefund, map[string]any{"order_id": fmt.Sprintf("%s%07d", prefixMixed, i), "amount_cents": benchAmount})
							if err == nil && res.IsError {
								err = errors.New(resultText(res))
							}
							return err
						}()
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							failed++
							if first == nil {
								first = err
							}
							return
						}
						lat = append(lat, time.Since(t0))
					})
				}
				wg.Wait()
				wall := time.Since(start)
				name := "desk"
				if mode == bare {
					name = "bare"
				}
				if failed > 0 {
					b.Errorf("%s: %d of %d connections failed; first: %v", name, failed, conns, first)
				}
				b.ReportMetric(float64(failed), name+"-failed")
				b.ReportMetric(quantile(lat, 0.5), name+"-p50-ms")
				b.ReportMetric(quantile(lat, 1), name+"-max-ms")
				b.ReportMetric(wall.Seconds(), name+"-wall-s")
			}
			b.ReportMetric(max(load0, loadAverage()), "loadavg")
		})
	}
}

// BenchmarkDeskSoak runs the protected desk for -desk.soak (make bench
// with BENCH_SOAK=3m) with 50 clients on the mixed load and reports its
// throughput per tenth of the run: flat while the refunds table grows.
func BenchmarkDeskSoak(b *testing.B) {
	if *deskSoak <= 0 {
		b.Skip("the soak runs with -desk.soak (BENCH_SOAK=3m make bench)")
	}
	for _, store := range []string{modeSQLite, modePostgres} {
		b.Run("store="+store, func(b *testing.B) {
			s := newSide(b, store, 50)
			window := *deskSoak / 10
			var rates []float64
			var failed int
			load0 := loadAverage()
			for i := range 10 {
				st := s.run(window, load{prefix: prefixMixed, slowOf4: true, clients: 50}, uint64(i))
				if st.failed > 0 && failed == 0 {
					b.Errorf("window %d: %d calls failed; first: %v", i, st.failed, st.firstFailure)
				}
				failed += st.failed
				rates = append(rates, st.rate())
				b.Logf("window %d: %.1f calls/s, p50 %.1f ms, p99 %.1f ms, reads p50 %.1f ms", i, st.rate(), quantile(st.lat, 0.5), quantile(st.lat, 0.99), quantile(st.reads, 0.5))
			}
			rows, err := s.rig.db.Refunds(context.Background(), "")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rates[0], "first-calls/s")
			b.ReportMetric(rates[len(rates)-1], "last-calls/s")
			b.ReportMetric(median(rates[len(rates)-3:])/median(rates[:3]), "soak-flatness")
			b.ReportMetric(float64(len(rows)), "refund-rows")
			b.ReportMetric(float64(failed), "failed-calls")
			b.ReportMetric(max(load0, loadAverage()), "loadavg")
		})
	}
}
