package refunds

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

func startDesk(t *testing.T, sdk string) (string, *DB) {
	t.Helper()
	ctx := context.Background()
	db, err := OpenDB(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp, mp := sdktrace.NewTracerProvider(), sdkmetric.NewMeterProvider()
	h, err := NewHandler(Config{DB: db, SDK: sdk, Guard: g, TracerProvider: tp, MeterProvider: mp, Tokens: DemoTokens,
		FastLatency: time.Millisecond, SlowLatency: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
		_ = db.Close()
	})
	return hs.URL, db
}

func connectDesk(t *testing.T, url, token string) *client.Client {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	return c
}

func refund(t *testing.T, c *client.Client, order string, amount any) *mcp.CallToolResult {
	t.Helper()
	var req mcp.CallToolRequest
	req.Params.Name = ToolIssueRefund
	req.Params.Arguments = map[string]any{"order_id": order, "amount_cents": amount}
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func marker(r *mcp.CallToolResult, key string) map[string]any {
	if r.Meta == nil {
		return nil
	}
	m, _ := r.Meta.AdditionalFields[key].(map[string]any)
	return m
}

func refundRows(t *testing.T, db *DB, order string) int {
	t.Helper()
	list, err := db.Refunds(context.Background(), order)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// TestRefundDesk_OnBothSDKs runs the refund desk's safety checks against
// its mcp-go and its go-sdk server, over real Streamable HTTP.
func TestRefundDesk_OnBothSDKs(t *testing.T) {
	for _, sdk := range []string{SDKMCPGo, SDKGoSDK} {
		t.Run(sdk, func(t *testing.T) {
			url, db := startDesk(t, sdk)
			alice := connectDesk(t, url, "demo-token-alice")

			// A retry that types the amount differently is rejected and
			// runs nothing.
			for _, amount := range []any{"100", 12.5, 0} {
				res := refund(t, alice, "ord_1001", amount)
				if !res.IsError || marker(res, spancontract.RefusalMetaKey)["reason"] != "invalid_arguments" {
					t.Errorf("amount %v: %+v", amount, res)
				}
			}
			if n := refundRows(t, db, "ord_1001"); n != 0 {
				t.Fatalf("%d refunds written by mistyped calls", n)
			}

			first := refund(t, alice, "ord_1001", 100)
			again := refund(t, alice, "ord_1001", 100.0)
			if first.IsError || marker(again, spancontract.ReplayMetaKey) == nil {
				t.Fatalf("first %+v, again %+v", first, again)
			}
			if refundRows(t, db, "ord_1001") != 1 {
				t.Errorf("%d refunds, want 1", refundRows(t, db, "ord_1001"))
			}

			// Another caller's identical call is its own.
			bob := connectDesk(t, url, "demo-token-bob")
			if res := refund(t, bob, "ord_1001", 100); res.IsError || marker(res, spancontract.ReplayMetaKey) != nil {
				t.Errorf("bob %+v", res)
			}
			if refundRows(t, db, "ord_1001") != 2 {
				t.Errorf("%d refunds, want 2", refundRows(t, db, "ord_1001"))
			}

			// Without a token, the validated session scopes the keys; its
			// ID is worthless once the session ended.
			anon := connectDesk(t, url, "")
			refund(t, anon, "ord_1002", 100)
			if res := refund(t, anon, "ord_1002", 100); marker(res, spancontract.ReplayMetaKey) == nil {
				t.Errorf("same session %+v", res)
			}
			sid := anon.GetSessionId()
			if err := anon.Close(); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(
				`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"issue_refund","arguments":{"order_id":"ord_1002","amount_cents":100}}}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("a terminated session's ID: %s, want 404", resp.Status)
			}
			if refundRows(t, db, "ord_1002") != 1 {
				t.Errorf("%d refunds of ord_1002, want 1", refundRows(t, db, "ord_1002"))
			}

			// An unknown token is refused.
			req, _ = http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer nope")
			if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("unknown token: %v %v", resp, err)
			} else {
				_ = resp.Body.Close()
			}
		})
	}
}

// The refund desk's human gate asks only above its threshold, with the
// amount and order in the question.
func TestRefundQuestion_AsksAboveTheThreshold(t *testing.T) {
	q := refundQuestion(10000)
	for _, tc := range []struct{ args, want string }{
		{`{"order_id":"ord_1001","amount_cents":25000}`, "Refund $250.00 on ord_1001?"},
		{`{"order_id":"ord_1001","amount_cents":10000}`, ""},
		{`{"order_id":"ord_1002","amount_cents":500}`, ""},
	} {
		if got, err := q([]byte(tc.args)); err != nil || got != tc.want {
			t.Errorf("question for %s: %q %v, want %q", tc.args, got, err, tc.want)
		}
	}
	if _, err := q([]byte(`{"amount_cents":"lots"}`)); err == nil {
		t.Error("malformed arguments gave a question")
	}
}
