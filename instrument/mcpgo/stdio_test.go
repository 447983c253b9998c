package mcpgo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// stdioRig serves r's server over mcp-go's stdio server reading through
// StdioInput, and speaks raw JSON-RPC lines to it.
type stdioRig struct {
	t     *testing.T
	in    *io.PipeWriter
	out   *bufio.Reader
	close func()
}

func serveStdio(t *testing.T, r *rig) *stdioRig {
	t.Helper()
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = server.NewStdioServer(r.srv).Listen(ctx, StdioInput(r.srv, serverIn), serverOut)
	}()
	sr := &stdioRig{t: t, in: clientOut, out: bufio.NewReader(clientIn)}
	var once sync.Once
	sr.close = func() {
		once.Do(func() {
			_ = clientOut.Close() // the input ends
			cancel()
			_ = serverOut.Close()
			<-done
		})
	}
	t.Cleanup(sr.close)
	return sr
}

func (s *stdioRig) send(line string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

// response reads lines until the response to id.
func (s *stdioRig) response(id int) map[string]any {
	s.t.Helper()
	for {
		line, err := s.out.ReadString('\n')
		if err != nil {
			s.t.Fatalf("reading the response to %d: %v", id, err)
		}
		var msg map[string]any
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			s.t.Fatalf("%q: %v", line, err)
		}
		if msg["id"] == float64(id) {
			return msg
		}
	}
}

// Over mcp-go's stdio transport, read through StdioInput, a client's
// notifications get their SERVER spans (named after the method, no request
// ID, network.transport pipe, the client's trace context from _meta), each
// ending after mcp-go has handled it; every byte reaches mcp-go unchanged,
// so requests are still answered, and a line over the bound is passed on
// unread.
func TestStdioInput_NotificationsGetTheirSpans(t *testing.T) {
	r := newRigWith(t, nil, nil, instrument.WithPropagator(propagation.TraceContext{}))
	var runs int
	var mu sync.Mutex
	refundServer(r, &runs, &mu)
	handled := make(chan time.Time, 4)
	r.srv.AddNotificationHandler("notifications/roots/list_changed", func(context.Context, mcp.JSONRPCNotification) {
		time.Sleep(20 * time.Millisecond)
		handled <- time.Now()
	})
	s := serveStdio(t, r)

	s.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"t","version":"1"}}}`)
	if res := s.response(1); res["result"] == nil {
		t.Fatalf("initialize: %v", res)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":{"traceparent":"00-` + traceID + `-00f067aa0ba902b7-01"}}}`)
	s.send(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	s.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"` + strings.Repeat("x", 5000) + `"}}`)
	// A case variant of a method is no notification of the protocol's
	// (mcp-go does not handle it either).
	s.send(`{"jsonrpc":"2.0","method":"Notifications/Initialized"}`)
	// A request carrying "notifications/" in a value is a request.
	s.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"refund","arguments":{"order_id":"notifications/initialized"}}}`)
	if res := s.response(2); res["result"] == nil {
		t.Fatalf("tools/call: %v", res)
	}
	s.close()
	var handledAt time.Time
	select {
	case handledAt = <-handled:
	default:
		t.Fatal("mcp-go did not handle notifications/roots/list_changed: the input did not reach it whole")
	}
	if runs != 1 {
		t.Fatalf("the tool ran %d times", runs)
	}

	for _, tc := range []struct {
		name   string
		traced bool
	}{{"notifications/initialized", true}, {"notifications/roots/list_changed", false}} {
		spans := r.spans(tc.name)
		if len(spans) != 1 {
			t.Fatalf("%s: %d spans, want 1", tc.name, len(spans))
		}
		sp := spans[0]
		if sp.SpanKind() != trace.SpanKindServer {
			t.Errorf("%s: kind %v", tc.name, sp.SpanKind())
		}
		if got := attrOf(sp, string(semconv.McpMethodNameKey)); got != tc.name {
			t.Errorf("%s: mcp.method.name %v", tc.name, got)
		}
		if got := attrOf(sp, string(semconv.McpProtocolVersionKey)); got != "2025-06-18" {
			t.Errorf("%s: mcp.protocol.version %v, want the one negotiated", tc.name, got)
		}
		if got := attrOf(sp, string(semconv.NetworkTransportKey)); got != "pipe" {
			t.Errorf("%s: network.transport %v, want pipe", tc.name, got)
		}
		for _, absent := range []string{sc.JSONRPCRequestID, string(semconv.McpSessionIDKey), string(semconv.GenAIToolNameKey)} {
			if got := attrOf(sp, absent); got != nil {
				t.Errorf("%s: %s = %v, want none", tc.name, absent, got)
			}
		}
		if tc.traced && sp.Parent().TraceID().String() != traceID {
			t.Errorf("%s: parent trace %s, want the client's %s", tc.name, sp.Parent().TraceID(), traceID)
		}
	}
	if end := r.spans("notifications/roots/list_changed")[0].EndTime(); end.Before(handledAt) {
		t.Errorf("the span ended at %v, before mcp-go had handled the notification (%v)", end, handledAt)
	}
	if n := len(r.spans("Notifications/Initialized")); n != 0 {
		t.Errorf("a case variant of notifications/initialized got %d spans", n)
	}
	if n := len(r.spans("notifications/cancelled")); n != 0 {
		t.Errorf("a 5 KB notification line got %d spans: it should be passed on unread", n)
	}
	if n := len(r.spans("tools/call refund")); n != 1 {
		t.Errorf("tools/call refund: %d spans", n)
	}
}

// StdioInput passes its input on byte for byte, whatever the reads' sizes
// and the lines' lengths; a server without instrumentation gets it too.
func TestStdioInput_PassesEveryByteOn(t *testing.T) {
	lines := []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		strings.Repeat("y", 9000),
		"",
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`no newline at the end`,
	}
	want := strings.Join(lines, "\n")
	for _, instrumented := range []bool{true, false} {
		srv := server.NewMCPServer("plain", "1")
		if instrumented {
			srv = newRig(t, nil, nil).srv
		}
		for _, size := range []int{1, 7, 4096, 1 << 16} {
			in := StdioInput(srv, iotest.HalfReader(strings.NewReader(want)))
			b, err := io.ReadAll(&limitedReads{r: in, n: size})
			if err != nil || string(b) != want {
				t.Fatalf("instrumented %v, reads of %d: got %d bytes (%v), want %d", instrumented, size, len(b), err, len(want))
			}
		}
	}
}

// The input's error reaches the reader after the bytes before it, a line
// without its newline included.
func TestStdioInput_PassesTheInputsErrorOn(t *testing.T) {
	boom := errors.New("boom")
	in := StdioInput(newRig(t, nil, nil).srv, io.MultiReader(strings.NewReader("line\npartial"), iotest.ErrReader(boom)))
	b, err := io.ReadAll(in)
	if string(b) != "line\npartial" || !errors.Is(err, boom) {
		t.Fatalf("got %q, %v; want the bytes, then %v", b, err, boom)
	}
	if n, err := in.Read(make([]byte, 8)); n != 0 || !errors.Is(err, boom) {
		t.Fatalf("read again: %d, %v; want the error again", n, err)
	}
}

// limitedReads reads at most n bytes at a time.
type limitedReads struct {
	r io.Reader
	n int
}

func (l *limitedReads) Read(p []byte) (int, error) {
	if len(p) > l.n {
		p = p[:l.n]
	}
	return l.r.Read(p)
}

// serveStdioChild names the environment variable under which the test
// binary is TestServeStdio_ServesTheProcessStdio's server.
const serveStdioChild = "IDEMKIT_MCPGO_SERVESTDIO_CHILD"

// serveStdioMain serves an instrumented server with ServeStdio until its
// input ends or a signal, then prints the names of the spans it ended, a
// line each, to standard error.
func serveStdioMain() int {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		return 2
	}
	srv := server.NewMCPServer("child", "1", ServerOptions(g, instrument.WithTracerProvider(tp))...)
	err = ServeStdio(srv)
	for _, s := range sr.Ended() {
		os.Stderr.WriteString("span: " + s.Name() + "\n")
	}
	os.Stderr.WriteString("returned: " + fmt.Sprint(err) + "\n")
	return 0
}

// ServeStdio serves the process's standard input and output, as mcp-go's
// server.ServeStdio does, with the notifications' spans; it returns when
// the input ends, and when the process gets SIGTERM.
func TestServeStdio_ServesTheProcessStdio(t *testing.T) {
	for _, end := range []string{"eof", "sigterm"} {
		t.Run(end, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), serveStdioChild+"=1")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			s := &stdioRig{t: t, in: nil, out: bufio.NewReader(stdout)}
			write := func(line string) {
				if _, err := io.WriteString(stdin, line+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			write(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			if res := s.response(1); res["result"] == nil {
				t.Fatalf("initialize: %v", res)
			}
			write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			write(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
			if res := s.response(2); res["result"] == nil {
				t.Fatalf("ping: %v", res)
			}
			if end == "eof" {
				_ = stdin.Close()
			} else if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("the server exited with %v:\n%s", err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the server did not return on %s:\n%s", end, stderr.String())
			}
			for _, want := range []string{"span: initialize\n", "span: notifications/initialized\n", "span: ping\n"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("no %q in the server's spans:\n%s", strings.TrimSpace(want), stderr.String())
				}
			}
		})
	}
}
