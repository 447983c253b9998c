package mcpgo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// ServeStdio serves s on the process's standard input and output until
// the input ends or the process gets SIGINT or SIGTERM, as mcp-go's
// server.ServeStdio does, reading its input through StdioInput so that the
// client's notifications get their spans too:
//
//	if err := mcpgo.ServeStdio(s); err != nil {
//		log.Fatal(err)
//	}
func ServeStdio(s *server.MCPServer, opts ...server.StdioOption) error {
	ss := server.NewStdioServer(s)
	for _, o := range opts {
		o(ss)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return ss.Listen(ctx, StdioInput(s, os.Stdin), os.Stdout)
}

// StdioInput returns stdin as the input of mcp-go's stdio server for s
// (server.StdioServer.Listen), recognising on the way each notification
// the client sends (notifications/initialized, notifications/cancelled,
// …) so that it gets its SERVER span, named after its method, and its
// operation duration, as the semantic conventions define and as it does
// over NewStreamableHTTPHandler. mcp-go hands notifications to neither
// its hooks nor its tracer; its stdio server handles a notification on
// its read loop, before it reads the next line, so the span ends when the
// next line is read (or the input ends):
//
//	err := server.NewStdioServer(s).Listen(ctx, mcpgo.StdioInput(s, os.Stdin), os.Stdout)
//
// Every byte is passed on unchanged, a line at a time; a line over 4 KiB
// is passed on unread (a client's notifications are a few hundred bytes).
// A server that is not instrumented gets its input unchanged.
func StdioInput(s *server.MCPServer, stdin io.Reader) io.Reader {
	return &stdioInput{s: s, r: bufio.NewReaderSize(stdin, maxNotificationBody+1)}
}

// stdioInput is the reader StdioInput returns.
type stdioInput struct {
	s *server.MCPServer
	r *bufio.Reader

	mu      sync.Mutex // protects what follows (mcp-go reads from a goroutine per line)
	rest    []byte     // what is left to return of the line read last
	long    bool       // the line being passed on is over the bound: no newline seen yet
	pending *mcpcall.Op
	err     error // the input's error, returned once rest is drained
}

func (in *stdioInput) Read(p []byte) (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.rest) == 0 {
		// The line returned last has been handled: so has its
		// notification.
		in.endPending()
		if in.err != nil {
			return 0, in.err
		}
		line, err := in.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			in.long = true
		case err == nil:
			if !in.long {
				in.recognise(line)
			}
			in.long = false
		case len(line) == 0:
			return 0, err
		default:
			in.err = err // after the last bytes (a line without its newline)
		}
		// ReadSlice's bytes are valid until the next read: keep a copy of
		// what does not fit in p.
		n := copy(p, line)
		in.rest = append(in.rest[:0], line[n:]...)
		return n, nil
	}
	n := copy(p, in.rest)
	in.rest = in.rest[n:]
	return n, nil
}

// endPending ends the span of the notification returned last, if any.
func (in *stdioInput) endPending() {
	if in.pending != nil {
		in.pending.End(mcpcall.Response{})
		in.pending = nil
	}
}

// recognise starts the span of line when it is a notification of the
// client's.
func (in *stdioInput) recognise(line []byte) {
	if !bytes.Contains(line, []byte(`"notifications/`)) {
		return
	}
	m := instrumentationOf(in.s)
	if m == nil {
		return
	}
	method, meta, ok := parseNotification(line)
	if !ok {
		return
	}
	req := mcpcall.Request{Method: method, Meta: meta,
		Transport: mcpcall.Transport{Network: spancontract.TransportPipe, Local: true}}
	if v := m.stdioProtocol.Load(); v != nil {
		req.ProtocolVersion = *v
	}
	_, in.pending = m.in.Start(context.Background(), &req)
}
