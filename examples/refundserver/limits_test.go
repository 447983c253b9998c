package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
)

// post sends body to the server's MCP endpoint on session (none when "")
// as the caller of token (none when "") and returns the status and the
// body of the answer.
func post(t *testing.T, mcpURL, session, token string, body io.Reader, length int64) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, mcpURL, body)
	req.ContentLength = length
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", protocol)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b
}

// The refund desk as people copy it: its memory store, its sessions, its
// request bodies and its sockets are bounded, on both SDKs, with flags to
// set each limit and an answer a client can read beyond it.
func TestRefundServer_LimitsAndRefusals(t *testing.T) {
	for _, sdk := range []string{refunds.SDKMCPGo, refunds.SDKGoSDK} {
		t.Run(sdk, func(t *testing.T) {
			dir := t.TempDir()
			p := startProcess(t, dir, "-sdk", sdk, "-store", "memory", "-db", filepath.Join(dir, "refunds.db"), "-gateway-db", filepath.Join(dir, "gateway.db"),
				"-fast-latency", "1ms", "-slow-latency", "1ms",
				"-memory-max-records", "2", "-max-sessions", "3", "-max-body-bytes", "65536", "-read-timeout", "500ms")
			alice := connect(t, p.url, "demo-token-alice")

			// The memory store holds 2 records: a third refund is refused,
			// runs nothing, and says why; a duplicate is still replayed.
			refund := func(order string) map[string]any {
				return result(t, alice.call("tools/call", map[string]any{"name": refunds.ToolIssueRefund,
					"arguments": map[string]any{"order_id": order, "amount_cents": 100}}))
			}
			for _, o := range []string{"ord_1001", "ord_1002"} {
				if res := refund(o); res["isError"] == true {
					t.Fatalf("%s: %v", o, res)
				}
			}
			full := refund("ord_1003")
			if full["isError"] != true || metaOf(full, "io.idemkit/refusal")["reason"] != "store_full" || !strings.Contains(text(full), "Nothing was done") {
				t.Fatalf("a third refund on a store of 2 records: %v", full)
			}
			if again := refund("ord_1001"); again["isError"] == true || metaOf(again, "io.idemkit/replay") == nil {
				t.Fatalf("a duplicate on the full store: %v", again)
			}
			if _, _, gw := counts(t, dir, "ord_1003"); gw != 0 {
				t.Fatalf("the gateway refunded ord_1003 %d times", gw)
			}

			// Three sessions at most: alice's and two more; a fourth
			// initialize gets 503 and a JSON-RPC error.
			initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + protocol +
				`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
			connect(t, p.url, "")
			connect(t, p.url, "")
			status, b := post(t, p.url, "", "", strings.NewReader(initialize), int64(len(initialize)))
			var refusal struct {
				Error struct {
					Code float64                   `json:"code"`
					Data map[string]map[string]any `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &refusal); status != http.StatusServiceUnavailable || err != nil ||
				refusal.Error.Data["io.idemkit/refusal"]["reason"] != "too_many_sessions" {
				t.Fatalf("a fourth session on a server of 3: %d %s", status, b)
			}

			// A body over 64 KiB: 413, unread.
			status, b = post(t, p.url, alice.sid, alice.token, strings.NewReader(strings.Repeat(" ", 1<<20)), 1<<20)
			if status != http.StatusRequestEntityTooLarge {
				t.Fatalf("a 1 MiB body on a server of 64 KiB: %d %s", status, b)
			}

			// A client trickling a body is cut by the 500 ms read timeout.
			u, _ := url.Parse(p.url)
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
				"Mcp-Session-Id: %s\r\nMcp-Protocol-Version: %s\r\nAuthorization: Bearer %s\r\nContent-Length: 10000\r\n\r\n", u.Path, u.Host, alice.sid, protocol, alice.token)
			var (
				closed = make(chan struct{})
				once   sync.Once
			)
			go func() {
				_, _ = io.Copy(io.Discard, bufio.NewReader(conn))
				once.Do(func() { close(closed) })
			}()
			sent := 0
			for ; sent < 10000; sent++ {
				select {
				case <-closed:
				case <-time.After(20 * time.Millisecond): // the whole body would take 200 s
					if _, err := conn.Write([]byte(" ")); err == nil {
						continue
					}
				}
				break
			}
			if sent >= 10000 {
				t.Fatal("the slow body was not cut")
			}
			// Meanwhile and after, the desk serves.
			if res := alice.call("tools/call", map[string]any{"name": refunds.ToolLookupOrder, "arguments": map[string]any{"order_id": "ord_1001"}}); res["error"] != nil {
				t.Fatalf("lookup_order after the refusals: %v", res)
			}
		})
	}
}

// With a SQL store, the desk runs the sweeper: the records of calls whose
// window ended are deleted.
func TestRefundServer_SweepsExpiredRecords(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir, serverArgs(dir, "-window", "1s", "-sweep-interval", "100ms", "-fast-latency", "1ms", "-slow-latency", "1ms")...)
	alice := connect(t, p.url, "demo-token-alice")
	for _, o := range []string{"ord_1001", "ord_1002", "ord_1003"} {
		if res := result(t, alice.call("tools/call", map[string]any{"name": refunds.ToolIssueRefund,
			"arguments": map[string]any{"order_id": o, "amount_cents": 100}})); res["isError"] == true {
			t.Fatalf("%s: %v", o, res)
		}
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "refunds.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	claims := func() int {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM idemkit_claims`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := claims(); n < 3 {
		t.Fatalf("%d claims after 3 refunds", n)
	}
	eventually(t, 20*time.Second, "the expired claims deleted", func() bool { return claims() == 0 })
}
