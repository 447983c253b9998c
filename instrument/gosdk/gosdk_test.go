package gosdk

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

type refundIn struct {
	OrderID     string `json:"order_id"`
	AmountCents int    `json:"amount_cents"`
}

// TestTypedTool_ArgumentsAreValidatedBeforeTheClaim: a tool added with
// mcp.AddTool, called with arguments its schema rejects, is refused before
// its key is derived or claimed, and nothing runs.
func TestTypedTool_ArgumentsAreValidatedBeforeTheClaim(t *testing.T) {
	sr, reader := tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	Instrument(s, g, instrument.WithTracerProvider(tp), instrument.WithMeterProvider(mp))
	var runs atomic.Int32
	mcp.AddTool(s, &mcp.Tool{Name: "refund"}, func(ctx context.Context, req *mcp.CallToolRequest, in refundIn) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), Transport(st), nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	for _, args := range []map[string]any{
		{"order_id": "o-1", "amount_cents": "100"},
		{"order_id": "o-1", "amount_cents": 12.5},
		{"order_id": "o-1", "amount_cents": 1, "surprise": true}, // typed tools' schemas forbid unknown fields
	} {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := res.Meta[sc.RefusalMetaKey].(map[string]any); !res.IsError || m["reason"] != sc.RefusalInvalidArguments {
			t.Errorf("%v: %+v", args, res)
		}
	}
	// The key argument passes the typed tool's strict schema.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refund",
		Arguments: map[string]any{"order_id": "o-1", "amount_cents": 100, "idempotency_key": "k"}})
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == sc.MetricClaimDuration {
			if n := m.Data.(metricdata.Histogram[float64]).DataPoints[0].Count; n != 1 {
				t.Errorf("%d claims, want 1 (the valid call only)", n)
			}
		}
	}
}

// TestTransport_ForgetsCallsTheMiddlewareNeverSaw: the SDK rejects some
// calls before any middleware (here, before initialize); what the wrapped
// connection recorded for them is dropped when it closes.
func TestTransport_ForgetsCallsTheMiddlewareNeverSaw(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	Instrument(s, nil)
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	ss, err := s.Connect(context.Background(), Transport(&mcp.IOTransport{Reader: serverIn, Writer: serverOut}), nil)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(clientIn)
	for i := range 3 {
		if _, err := io.WriteString(clientOut, `{"jsonrpc":"2.0","id":`+string(rune('1'+i))+`,"method":"tools/list"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		if !lines.Scan() || !strings.Contains(lines.Text(), "error") {
			t.Fatalf("response %q", lines.Text())
		}
	}
	if n := count(&byExtra); n != 3 {
		t.Errorf("%d calls recorded before close, want 3", n)
	}
	_ = clientOut.Close()
	_ = ss.Close()
	_ = ss.Wait()
	_ = clientIn.Close()
	if n := count(&byExtra); n != 0 {
		t.Errorf("%d calls still recorded after the connection closed", n)
	}
}

func count(m interface{ Range(func(any, any) bool) }) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

func TestHTTPHandler_ReadsTheRequestIDAndPutsTheBodyBack(t *testing.T) {
	var got []string
	var bodies []string
	h := HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := lookupRequest(&mcp.RequestExtra{Header: r.Header})
		got = append(got, info.id)
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
	}), true)
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":"abc","method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`not json`,
	} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body)))
	}
	want := []string{"abc", "12345678901234567890", "", "", ""}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: id %q, want %q", i, got[i], want[i])
		}
	}
	if bodies[2] != `[{"jsonrpc":"2.0","id":1,"method":"ping"}]` || bodies[4] != `not json` {
		t.Errorf("bodies %q", bodies)
	}
	if count(&byToken) != 0 {
		t.Error("a request's record outlived it")
	}
}

// TestHTTPHandler_RecordsARequestUnderATokenAClientCannotForge: the SDK
// hands the middleware a request's header and nothing else of it;
// HTTPHandler records the request under a token it puts in that header
// (it used the header map's address: a copy of the header lost the
// record). A client's own value of the header is replaced, so a client
// cannot present another request's token.
func TestHTTPHandler_RecordsARequestUnderATokenAClientCannotForge(t *testing.T) {
	inFirst, release := make(chan string), make(chan struct{})
	var firstInfo, secondInfo requestInfo
	var secondToken string
	h := HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := lookupRequest(&mcp.RequestExtra{Header: r.Header.Clone()})
		if info.id == "first" {
			firstInfo = info
			inFirst <- r.Header.Get(requestTokenHeader)
			<-release
			return
		}
		secondInfo, secondToken = info, r.Header.Get(requestTokenHeader)
	}), true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":"first","method":"ping"}`)))
	}()
	firstToken := <-inFirst
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":"second","method":"ping"}`))
	req.Header.Set(requestTokenHeader, firstToken) // a forgery
	h.ServeHTTP(httptest.NewRecorder(), req)
	close(release)
	<-done
	if !firstInfo.known || firstInfo.id != "first" {
		t.Errorf("the first request, looked up through a copy of its header: %+v", firstInfo)
	}
	if firstToken == "" || secondToken == firstToken || !secondInfo.known || secondInfo.id != "second" {
		t.Errorf("the second request presented the first's token %q: it carries %q and was looked up as %+v", firstToken, secondToken, secondInfo)
	}
	if count(&byToken) != 0 {
		t.Error("a request's record outlived it")
	}
}
