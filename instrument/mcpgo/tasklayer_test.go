package mcpgo

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestTaskLayer_ReadsABoundedPrefixOfTheBody: the task layer looks into a
// request's body for task methods; it must not buffer a body of any size
// to do so (it read it all). A body over the bound reaches mcp-go whole,
// unread by the layer beyond the bound: its arguments are over the limit
// at which a protected call is refused anyway.
func TestTaskLayer_ReadsABoundedPrefixOfTheBody(t *testing.T) {
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := server.NewMCPServer("s", "1.0.0", ServerOptions(g)...)
	for _, size := range []int{1 << 10, maxTaskBody + 1, 3 * maxTaskBody} {
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","task":{},"arguments":{"pad":"` +
			strings.Repeat("x", size) + `"}}}`)
		src := &countingReader{r: bytes.NewReader(body)}
		var readBefore int
		var got []byte
		inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			readBefore = src.n
			got, _ = io.ReadAll(r.Body)
		})
		req := httptest.NewRequest(http.MethodPost, "/mcp", io.NopCloser(src))
		taskLayer(s, inner).ServeHTTP(httptest.NewRecorder(), req)
		if !bytes.Equal(got, body) {
			t.Fatalf("body of %d bytes: mcp-go got %d bytes, not the body", len(body), len(got))
		}
		if len(body) > maxTaskBody && readBefore > maxTaskBody+1 {
			t.Errorf("body of %d bytes: the task layer read %d bytes of it before passing it on, over its bound of %d", len(body), readBefore, maxTaskBody)
		}
	}
}
