package gosdk

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// The go-sdk (v1.8.0) has no MCP tasks: a server never advertises them, a
// task-augmented tools/call is served as a plain call (the SDK ignores the
// task parameter, as the specification asks of a server without the
// capability), and its Streamable HTTP handler refuses the task methods
// with HTTP 400 before any middleware sees them. NewStreamableHTTPHandler
// answers them instead with the JSON-RPC error an MCP client expects
// (-32601, method not found), and gives each its SERVER span.

var taskMethods = map[string]bool{
	spancontract.MethodTasksGet: true, spancontract.MethodTasksResult: true,
	spancontract.MethodTasksCancel: true, spancontract.MethodTasksList: true,
}

// refuseTasks answers the task methods that reach h, the Streamable HTTP
// handler of getServer's servers, with -32601 and a span.
func refuseTasks(getServer func(*http.Request) *mcp.Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(r.Body, maxParsedBody+1))
		if err != nil || n > maxParsedBody {
			r.Body = readCloser{io.MultiReader(&buf, r.Body), r.Body}
			h.ServeHTTP(w, r)
			return
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(buf.Bytes(), &msg) != nil || !taskMethods[msg.Method] || len(msg.ID) == 0 {
			h.ServeHTTP(w, r)
			return
		}
		s := getServer(r)
		if s == nil {
			h.ServeHTTP(w, r)
			return
		}
		m, ok := servers.Load(s)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		req := mcpcall.Request{Method: msg.Method, SessionID: r.Header.Get("Mcp-Session-Id"), ProtocolVersion: r.Header.Get("Mcp-Protocol-Version")}
		req.ID, req.HasID = mcpcall.FormatRawRequestID(msg.ID)
		if v, ok := byToken.Load(r.Header.Get(requestTokenHeader)); ok {
			req.Transport = v.(*requestInfo).transport
		}
		const text = "Method not found: this server does not support MCP tasks (its SDK, the go-sdk, has none); call the tool without task augmentation"
		_, op := m.in.Start(r.Context(), &req)
		op.End(mcpcall.Response{HasCode: true, Code: -32601, Message: text})
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "error": map[string]any{"code": -32601, "message": text}})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}
