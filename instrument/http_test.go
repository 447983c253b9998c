package instrument

import (
	"github.com/idemkit-mcp/idemkit/internal/httplimit"
	"net/http"
	"testing"
)

func TestNewHTTPServer_HasReadAndIdleTimeoutsAndNoWriteTimeout(t *testing.T) {
	h := http.NotFoundHandler()
	srv := NewHTTPServer(h)
	if srv.ReadHeaderTimeout != httplimit.ServerReadHeaderTimeout || srv.ReadTimeout != httplimit.ServerReadTimeout ||
		srv.IdleTimeout != httplimit.ServerIdleTimeout || srv.MaxHeaderBytes != httplimit.ServerMaxHeaderBytes || srv.WriteTimeout != 0 || srv.Handler == nil {
		t.Errorf("NewHTTPServer: %+v", srv)
	}
	if httplimit.ServerReadHeaderTimeout <= 0 || httplimit.ServerReadTimeout < httplimit.ServerReadHeaderTimeout || httplimit.ServerIdleTimeout <= 0 {
		t.Error("defaults")
	}
}
