package instrument

import (
	"net/http"
	"testing"
)

func TestNewHTTPServer_HasReadAndIdleTimeoutsAndNoWriteTimeout(t *testing.T) {
	h := http.NotFoundHandler()
	srv := NewHTTPServer(h)
	if srv.ReadHeaderTimeout != DefaultReadHeaderTimeout || srv.ReadTimeout != DefaultReadTimeout ||
		srv.IdleTimeout != DefaultIdleTimeout || srv.MaxHeaderBytes != DefaultMaxHeaderBytes || srv.WriteTimeout != 0 || srv.Handler == nil {
		t.Errorf("NewHTTPServer: %+v", srv)
	}
	if DefaultReadHeaderTimeout <= 0 || DefaultReadTimeout < DefaultReadHeaderTimeout || DefaultIdleTimeout <= 0 {
		t.Error("defaults")
	}
}
