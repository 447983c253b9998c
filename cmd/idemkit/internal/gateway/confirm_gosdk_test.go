package gateway

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// goSDKAsker is a go-sdk client's user: it answers every elicitation with
// action after delay and keeps the questions.
type goSDKAsker struct {
	action string
	delay  time.Duration
	mu     sync.Mutex
	asked  []string
}

func (a *goSDKAsker) questions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

func (a *goSDKAsker) elicit(ctx context.Context, req *gomcp.ElicitRequest) (*gomcp.ElicitResult, error) {
	a.mu.Lock()
	a.asked = append(a.asked, req.Params.Message)
	a.mu.Unlock()
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &gomcp.ElicitResult{Action: a.action}, nil
}

// goSDKClient connects an official go-sdk client to the gateway at url,
// declaring elicitation when asker is not nil.
func goSDKClient(t *testing.T, url string, asker *goSDKAsker) *gomcp.ClientSession {
	t.Helper()
	opts := &gomcp.ClientOptions{}
	if asker != nil {
		opts.ElicitationHandler = asker.elicit
	}
	c := gomcp.NewClient(&gomcp.Implementation{Name: "gosdk-client", Version: "1.0.0"}, opts)
	tr := &gomcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: withAuthorization{"Bearer tok"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func goSDKRefusal(res *gomcp.CallToolResult) string {
	m, _ := res.Meta[spancontract.RefusalMetaKey].(map[string]any)
	r, _ := m["reason"].(string)
	return r
}

func goSDKText(res *gomcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*gomcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// TestGateway_ConfirmWithTheGoSDKClient: the gateway's own question reaches
// the official go-sdk client (v1.8.0) as an elicitation; accept forwards
// once, the retry sent while the question is open (past the 500 ms lease)
// is answered in progress and never asked; decline forwards nothing; a
// go-sdk client without an elicitation handler is refused.
func TestGateway_ConfirmWithTheGoSDKClient(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: leaseGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig)})
	ctx := context.Background()
	human := &goSDKAsker{action: "accept", delay: askAnswer}
	a, b := goSDKClient(t, gw, human), goSDKClient(t, gw, &goSDKAsker{action: "accept"})
	args := map[string]any{"order_id": "ord_1201", "amount_cents": 40}
	type answer struct {
		res *gomcp.CallToolResult
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := a.CallTool(ctx, &gomcp.CallToolParams{Name: "refund", Arguments: args})
		first <- answer{res, err}
	}()
	if !eventually(func() bool { return len(human.questions()) == 1 }) {
		t.Fatal("the go-sdk client was never asked")
	}
	time.Sleep(2 * askLease)
	retry, err := b.CallTool(ctx, &gomcp.CallToolParams{Name: "refund", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	f := <-first
	if f.err != nil {
		t.Fatal(f.err)
	}
	if f.res.IsError || goSDKText(f.res) != "refunded ord_1201" {
		t.Errorf("first call: %q", goSDKText(f.res))
	}
	if got := goSDKRefusal(retry); got != spancontract.RefusalInProgress {
		t.Errorf("retry: %q (%q), want in_progress", got, goSDKText(retry))
	}
	if q := human.questions(); len(q) != 1 || q[0] != "Refund 40 cents on ord_1201?" || len(up.made()) != 1 {
		t.Fatalf("questions %q, refunds %v; want one question and one refund", q, up.made())
	}

	no := &goSDKAsker{action: "decline"}
	declined, err := goSDKClient(t, gw, no).CallTool(ctx, &gomcp.CallToolParams{Name: "refund", Arguments: map[string]any{"order_id": "ord_1202", "amount_cents": 40}})
	if err != nil {
		t.Fatal(err)
	}
	if goSDKRefusal(declined) != spancontract.RefusalDeclined || !declined.IsError || len(no.questions()) != 1 || len(up.made()) != 1 {
		t.Errorf("declined: %q (%s), asked %d, refunds %v", goSDKText(declined), goSDKRefusal(declined), len(no.questions()), up.made())
	}

	unasked, err := goSDKClient(t, gw, nil).CallTool(ctx, &gomcp.CallToolParams{Name: "refund", Arguments: map[string]any{"order_id": "ord_1203", "amount_cents": 40}})
	if err != nil {
		t.Fatal(err)
	}
	if goSDKRefusal(unasked) != spancontract.RefusalConfirmationUnavailable || len(up.made()) != 1 {
		t.Errorf("a client without elicitation: %q (%s), refunds %v", goSDKText(unasked), goSDKRefusal(unasked), up.made())
	}
}
