package harness

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

var (
	portsMu sync.Mutex // protects handedOut
	// handedOut are the ports FreePort returned in this process: the
	// kernel may hand a just-released port out again, and a run picks all
	// its ports before it starts what listens on them.
	handedOut = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now and
// that no earlier call of this process returned.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("no free local TCP port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free local TCP port that was not handed out already")
}

// FreeAddr returns "127.0.0.1:PORT" for a FreePort.
func FreeAddr() (string, error) {
	p, err := FreePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// Listening returns a readiness check: something accepts TCP connections
// on addr (host:port).
func Listening(addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
}

// FileNotEmpty returns a readiness check: path exists and is not empty.
func FileNotEmpty(path string) func() bool {
	return func() bool {
		st, err := os.Stat(path)
		return err == nil && st.Size() > 0
	}
}

// HTTPOK returns a readiness check: GET url answers 200.
func HTTPOK(url string) func() bool {
	c := &http.Client{Timeout: time.Second}
	return func() bool {
		resp, err := c.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}
