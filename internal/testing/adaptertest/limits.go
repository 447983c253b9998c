package adaptertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// The limits every front end enforces, and the refusals a client reads
// beyond them.

// testStoreFull: a memory store at its record limit, none expired, refuses
// a new call with store_full (nothing runs, a later retry may pass) and
// still replays the calls it holds.
func testStoreFull(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: InProcess, store: &idemkit.MemoryStore{MaxRecords: 2}, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	for _, o := range []string{"o-1", "o-2"} {
		if res := call(t, c, "refund", map[string]any{"order_id": o}, nil); isError(res) {
			t.Fatalf("%s: %v", o, res)
		}
	}
	res := call(t, c, "refund", map[string]any{"order_id": "o-3"}, nil)
	m := marker(res, sc.RefusalMetaKey)
	if !isError(res) || m["reason"] != sc.RefusalStoreFull || runs.get() != 2 {
		t.Fatalf("a third order on a store of 2 records: %v (runs %d), want a store_full refusal and no run", res, runs.get())
	}
	if ms, _ := m["retry_after_ms"].(float64); ms <= 0 {
		t.Errorf("the refusal's marker %v has no retry_after_ms", m)
	}
	if txt := text(res); !strings.Contains(txt, "Nothing was done") || !strings.Contains(txt, "at capacity") || !strings.Contains(txt, "later") {
		t.Errorf("refusal text %q: want it to say nothing was done, the server is at capacity, retry later", txt)
	}
	if again := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil); isError(again) || marker(again, sc.ReplayMetaKey) == nil {
		t.Errorf("a duplicate of a stored call on a full store: %v, want its replay", again)
	}
	spans := r.waitSpans("tools/call refund", 4)
	if a := attrs(spans[2]); a[sc.RefusalReason] != sc.RefusalStoreFull || a[sc.Outcome] != nil {
		t.Errorf("the refused call's span: %v", a)
	}
}

// raw is a Streamable HTTP client written by hand, for the requests an SDK
// client does not make (or does not show the answer of).
type raw struct {
	t   *testing.T
	url string
}

// post sends one JSON-RPC message (session "" for none) and returns the
// response's status, header and body.
func (c raw) post(session string, body io.Reader, length int64) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", LegacyProtocol)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, b
}

func (c raw) send(session, msg string) (int, http.Header, []byte) {
	c.t.Helper()
	return c.post(session, strings.NewReader(msg), int64(len(msg)))
}

const rawInitialize = `{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"` + LegacyProtocol +
	`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// open initializes a session and returns its ID, or "" and the refusal's
// status and body.
func (c raw) open() (string, int, []byte) {
	c.t.Helper()
	status, h, b := c.send("", rawInitialize)
	id := h.Get("Mcp-Session-Id")
	if status != http.StatusOK || id == "" {
		return "", status, b
	}
	if st, _, b := c.send(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); st/100 != 2 {
		c.t.Fatalf("notifications/initialized: %d %s", st, b)
	}
	return id, status, b
}

func (c raw) ping(session string) int {
	c.t.Helper()
	st, _, _ := c.send(session, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	return st
}

func (c raw) close(session string) {
	req, _ := http.NewRequest(http.MethodDelete, c.url, nil)
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", LegacyProtocol)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// refusal decodes a JSON-RPC error body with a refusal marker.
func refusal(t *testing.T, b []byte) (id any, code float64, message string, m map[string]any) {
	t.Helper()
	var msg struct {
		ID    any `json:"id"`
		Error struct {
			Code    float64                   `json:"code"`
			Message string                    `json:"message"`
			Data    map[string]map[string]any `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatalf("the refusal is not a JSON-RPC error: %v: %s", err, b)
	}
	return msg.ID, msg.Error.Code, msg.Error.Message, msg.Error.Data[sc.RefusalMetaKey]
}

// testHTTPSessionCap: a server at its session cap refuses to open another
// session (HTTP 503, Retry-After, a JSON-RPC error saying so), serves the
// sessions it has, and opens one again once a session ends.
func testHTTPSessionCap(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&runs)}, httpLimits: instrument.HTTPLimits{MaxSessions: 2}})
	c := raw{t, r.srv.URL()}
	a := r.connect(ClientConfig{Protocol: LegacyProtocol})
	b, _, _ := c.open()
	if b == "" {
		t.Fatal("the second session was refused")
	}
	t.Cleanup(func() { c.close(b) })
	id, status, body := c.open()
	if id != "" || status != http.StatusServiceUnavailable {
		t.Fatalf("a third session on a server of 2: status %d, session %q, want 503 and none", status, id)
	}
	rid, code, msg, m := refusal(t, body)
	if rid != float64(7) || code != -32000 || m["reason"] != "too_many_sessions" || m["max_sessions"] != float64(2) ||
		!strings.Contains(msg, "nothing was done") || !strings.Contains(msg, "Retry") {
		t.Errorf("refusal id %v code %v %q %v", rid, code, msg, m)
	}
	// The sessions open are served as ever.
	if res := call(t, a, "refund", map[string]any{"order_id": "o-1"}, nil); isError(res) || runs.get() != 1 {
		t.Fatalf("a call on an open session at the cap: %v", res)
	}
	if st := c.ping(b); st != http.StatusOK {
		t.Fatalf("a ping on an open session at the cap: %d", st)
	}
	// A session that ends frees its place.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	id, status, body = c.open()
	if id == "" {
		t.Fatalf("after a session ended: status %d %s, want a new session", status, body)
	}
	c.close(id)
}

// testHTTPIdleSessions: a session without requests for the idle timeout is
// ended (its next request gets 404) and frees its place; one in use is
// not.
func testHTTPIdleSessions(t *testing.T, h Harness) {
	const idle = 150 * time.Millisecond
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&counter{})}, httpLimits: instrument.HTTPLimits{MaxSessions: 2, SessionIdleTimeout: idle}})
	c := raw{t, r.srv.URL()}
	busy, _, _ := c.open()
	quiet, _, _ := c.open()
	if busy == "" || quiet == "" {
		t.Fatal("opening two sessions failed")
	}
	// The busy session pings throughout; the quiet one is left alone
	// until a third session finds room.
	deadline := time.Now().Add(20 * time.Second)
	var third string
	for pings := 0; third == ""; pings++ {
		if time.Now().After(deadline) {
			t.Fatalf("no session was ended in %v with an idle timeout of %v", 20*time.Second, idle)
		}
		if st := c.ping(busy); st != http.StatusOK {
			t.Fatalf("ping %d of the session in use: %d, want it kept", pings, st)
		}
		if id, st, b := c.open(); id != "" {
			third = id
		} else if st != http.StatusServiceUnavailable {
			t.Fatalf("opening a session: %d %s", st, b)
		}
		time.Sleep(idle / 5)
	}
	t.Cleanup(func() { c.close(third); c.close(busy) })
	if st := c.ping(quiet); st != http.StatusNotFound {
		t.Fatalf("the idle session's next request: %d, want 404 (ended)", st)
	}
	if st := c.ping(busy); st != http.StatusOK {
		t.Fatalf("the session in use: %d, want it kept", st)
	}
}

// testHTTPGETNeedsASession: a GET (the server's SSE stream) without a
// session, or with one the server did not issue, opens nothing.
func testHTTPGETNeedsASession(t *testing.T, h Harness) {
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&counter{})}})
	for _, tc := range []struct {
		session string
		want    int
	}{{"", http.StatusBadRequest}, {"mcp-session-00000000-0000-4000-8000-000000000000", http.StatusNotFound}} {
		req, _ := http.NewRequest(http.MethodGet, r.srv.URL(), nil)
		req.Header.Set("Accept", "text/event-stream")
		if tc.session != "" {
			req.Header.Set("Mcp-Session-Id", tc.session)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("GET with session %q: %v", tc.session, err)
		}
		resp.Body.Close()
		cancel()
		if resp.StatusCode != tc.want {
			t.Errorf("GET with session %q: %d, want %d", tc.session, resp.StatusCode, tc.want)
		}
	}
}

// zeros is an io.Reader of n bytes of 'a' that allocates nothing.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), z.n)]
	for i := range p {
		p[i] = 'a'
	}
	z.n -= int64(len(p))
	return len(p), nil
}

// testHTTPBodyLimit: a 100 MB tools/call is answered 413 without the
// server reading it into memory (with and without a declared length),
// and runs nothing; so is an oversized initialize.
func testHTTPBodyLimit(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&runs)}})
	c := raw{t, r.srv.URL()}
	session, _, _ := c.open()
	if session == "" {
		t.Fatal("no session")
	}
	t.Cleanup(func() { c.close(session) })
	const size = 100 << 20
	prefix := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refund","arguments":{"order_id":"`
	suffix := `"}}}`
	body := func() io.Reader {
		return io.MultiReader(strings.NewReader(prefix), &zeros{size}, strings.NewReader(suffix))
	}
	total := int64(len(prefix) + size + len(suffix))
	for _, tc := range []struct {
		name    string
		session string
		length  int64
	}{
		{"declared length", session, total},
		{"chunked", session, 0},
		{"initialize, chunked", "", 0},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		status, _, b := c.post(tc.session, body(), tc.length)
		runtime.ReadMemStats(&after)
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: a %d MiB body got %d %.200s, want 413", tc.name, size>>20, status, b)
		}
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d, %.1f MiB allocated for a %d MiB body", tc.name, status, float64(allocated)/(1<<20), size>>20)
		if allocated > 48<<20 {
			t.Errorf("%s: %.1f MiB allocated while a %d MiB body was refused: it was read", tc.name, float64(allocated)/(1<<20), size>>20)
		}
	}
	if runs.get() != 0 {
		t.Fatalf("the tool ran %d times", runs.get())
	}
	if st := c.ping(session); st != http.StatusOK {
		t.Fatalf("the session after the refusals: %d", st)
	}
}

// testHTTPSlowBody: clients that trickle a request body are cut by the
// server's read timeout, and the server serves others meanwhile.
func testHTTPSlowBody(t *testing.T, h Harness) {
	const timeout = 300 * time.Millisecond
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&counter{})}, readTimeout: timeout})
	c := raw{t, r.srv.URL()}
	session, _, _ := c.open()
	if session == "" {
		t.Fatal("no session")
	}
	t.Cleanup(func() { c.close(session) })
	u, err := url.Parse(r.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	const conns, length = 20, 4000
	head := func(n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
			"Mcp-Session-Id: %s\r\nMcp-Protocol-Version: %s\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, session, LegacyProtocol, n)
	}
	// The same request sent at once is served: the slow ones below are
	// cut for their pace, not their form.
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	if conn, err := net.Dial("tcp", u.Host); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.WriteString(conn, head(len(ping))+ping)
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("the request sent at once: %q", line)
		}
	}
	var wg sync.WaitGroup
	sent := make([]int, conns)
	cut := make([]bool, conns)
	for i := range conns {
		wg.Go(func() {
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, head(length))
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, conn) // until the server closes the connection
				close(closed)
			}()
			// One byte every 20 ms: the whole body would take 80 s.
			for sent[i] < length {
				select {
				case <-closed:
					cut[i] = true
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := conn.Write([]byte("{")); err != nil {
					cut[i] = true
					return
				}
				sent[i]++
			}
		})
	}
	// Meanwhile the server answers.
	if st := c.ping(session); st != http.StatusOK {
		t.Errorf("a ping while slow bodies arrive: %d", st)
	}
	wg.Wait()
	for i := range conns {
		if !cut[i] || sent[i] >= length {
			t.Fatalf("connection %d sent %d of %d bytes and was not cut by the %v read timeout", i, sent[i], length, timeout)
		}
	}
}

// testHTTPEndedSessionsFreeMemory: sessions that clients abandon (no
// DELETE) are ended once idle, and the server's memory does not grow with
// the sessions ever opened: round after round of abandoned sessions, the
// heap after each round stays where it was after the second.
func testHTTPEndedSessionsFreeMemory(t *testing.T, h Harness) {
	const idle, n, rounds = 200 * time.Millisecond, 1000, 4
	// No spans or metrics recorded: the test's recorder would keep what
	// the server let go.
	quiet := []instrument.Option{instrument.WithTracerProvider(tracenoop.NewTracerProvider()), instrument.WithMeterProvider(metricnoop.NewMeterProvider())}
	r := start(t, h, setup{transport: HTTP, tools: []Tool{refundTool(&counter{})}, opts: quiet,
		httpLimits: instrument.HTTPLimits{MaxSessions: n, SessionIdleTimeout: idle}})
	c := raw{t, r.srv.URL()}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc + ms.StackInuse) // a session's goroutines hold stacks
	}
	// openSession is c.open, except that under load the idle timeout may
	// end a session between its initialize and its notifications/initialized
	// (404): that is the behaviour under test, not a failure. ended says so.
	openSession := func() (id string, status int, body []byte, ended bool) {
		t.Helper()
		status, hdr, body := c.send("", rawInitialize)
		id = hdr.Get("Mcp-Session-Id")
		if status != http.StatusOK || id == "" {
			return "", status, body, false
		}
		switch st, _, b := c.send(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); {
		case st/100 == 2:
			return id, status, body, false
		case st == http.StatusNotFound:
			return id, status, body, true
		default:
			t.Fatalf("notifications/initialized: %d %s", st, b)
			return "", st, b, false
		}
	}
	var open, after [rounds]int64 // open: the sessions of the round are being ended as the last ones open
	for round := range rounds {
		for i := range n {
			if id, _, _, _ := openSession(); id == "" {
				t.Fatalf("round %d: session %d was refused", round, i)
			}
		}
		open[round] = heap()
		// The server is at its cap of n: once n sessions could be opened
		// again (each closed at once), all n abandoned ones were ended.
		deadline := time.Now().Add(30 * time.Second)
		for freed := 0; freed < n; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of the %d abandoned sessions were ended within %v", round, freed, n, 30*time.Second)
			}
			id, st, b, ended := openSession()
			switch {
			case id != "":
				if !ended {
					c.close(id)
				}
				freed++
			case st == http.StatusServiceUnavailable:
				time.Sleep(idle / 4)
			default:
				t.Fatalf("opening a session: %d %s", st, b)
			}
		}
		after[round] = heap()
		t.Logf("round %d: heap and stacks %.2f MiB with %d abandoned sessions open, %.2f MiB once they were ended",
			round, float64(open[round])/(1<<20), n, float64(after[round])/(1<<20))
	}
	if open[0] <= after[0] {
		t.Fatalf("%d open sessions took no memory (%d, then %d bytes): the measure cannot tell", n, open[0], after[0])
	}
	// From the second round on (the first grows what every round reuses:
	// maps, buffers), ended sessions leave nothing: less than 256 bytes
	// each, where an open session holds kilobytes (its state, its
	// goroutines' stacks).
	if grew, limit := after[rounds-1]-after[1], int64(n*(rounds-2)*256); grew > limit {
		t.Fatalf("the heap and stacks grew by %.2f MiB over %d more rounds of %d ended sessions, over %.2f MiB",
			float64(grew)/(1<<20), rounds-2, n, float64(limit)/(1<<20))
	}
}
