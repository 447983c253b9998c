package mcpgo

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/internal/httplimit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// maxNotificationBody is the largest POST body the notification layer
// looks into: a client's notifications are a few hundred bytes; a larger
// body is passed on unread.
const maxNotificationBody = 4 << 10

// notificationLayer wraps the Streamable HTTP handler h of s: every
// notification a client POSTs (notifications/initialized,
// notifications/cancelled, …) gets its SERVER span, named after its
// method, and its operation duration, as the semantic conventions define.
// mcp-go hands notifications to neither its hooks nor its tracer, so they
// are recognised here, in the HTTP request, which mcp-go handles before it
// answers (202 Accepted). Over stdio, StdioInput recognises them in the
// input; over the in-process transport mcp-go offers no place to see
// them: they have no span there.
func notificationLayer(s *server.MCPServer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := instrumentationOf(s)
		if m == nil || r.Method != http.MethodPost || r.Body == nil || r.ContentLength < 0 || r.ContentLength > maxNotificationBody {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxNotificationBody+1))
		if err != nil {
			http.Error(w, "the request body could not be read", http.StatusBadRequest)
			return
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"notifications/`)) {
			h.ServeHTTP(w, r)
			return
		}
		method, meta, ok := parseNotification(body)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		req := mcpcall.Request{Method: method, Meta: meta, ProtocolVersion: r.Header.Get(server.HeaderKeyProtocolVersion)}
		req.Transport = transportOf(r.Context(), nil)
		ctx, op := m.in.Start(r.Context(), &req)
		ended := false
		defer func() {
			if !ended {
				op.End(mcpcall.Response{Panicked: true})
			}
		}()
		sw := &httplimit.StatusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		if sw.Status < 300 {
			// Accepted: the session ID, if any, is one the server issued.
			op.SetSession(r.Header.Get(server.HeaderKeySessionID), "")
		}
		ended = true
		op.End(mcpcall.Response{})
	})
}

// parseNotification returns the method and the params._meta of msg when it
// is one JSON-RPC notification of a client's (mcpcall.IsNotification), and
// reports whether it is.
func parseNotification(msg []byte) (method string, meta map[string]any, ok bool) {
	var n struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &n) != nil || (len(n.ID) > 0 && string(n.ID) != "null") || !mcpcall.IsNotification(n.Method) {
		return "", nil, false
	}
	return n.Method, n.Params.Meta, true
}
