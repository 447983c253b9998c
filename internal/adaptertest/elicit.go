package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// ElicitFunc asks the user of the client a question through MCP
// elicitation (a form with no fields) and returns the user's action:
// "accept", "decline" or "cancel".
type ElicitFunc func(ctx context.Context, message string) (action string, err error)

type elicitKey struct{}

// WithElicit returns ctx with the SDK's way to elicit, for Tool.Run: a
// harness wraps every handler's context with it.
func WithElicit(ctx context.Context, f ElicitFunc) context.Context {
	return context.WithValue(ctx, elicitKey{}, f)
}

// Elicit asks the client's user message, through the function the harness
// put in ctx.
func Elicit(ctx context.Context, message string) (string, error) {
	f, _ := ctx.Value(elicitKey{}).(ElicitFunc)
	if f == nil {
		return "", errors.New("adaptertest: the harness gave the handler no way to elicit")
	}
	return f(ctx, message)
}

// asker is a client's user who answers elicitations when told to.
type asker struct {
	mu      sync.Mutex // protects asked
	asked   []string
	waiting chan struct{} // closed at the first question
	once    sync.Once
	answer  chan string // the action to answer with
}

func newAsker() *asker { return &asker{waiting: make(chan struct{}), answer: make(chan string, 8)} }

// elicit takes its time over the first question (until told the action);
// a later one (the same question asked again) it accepts at once, so that
// a test of the double question fails instead of hanging.
func (a *asker) elicit(ctx context.Context, message string) string {
	a.mu.Lock()
	a.asked = append(a.asked, message)
	n := len(a.asked)
	a.mu.Unlock()
	if n > 1 {
		return "accept"
	}
	a.once.Do(func() { close(a.waiting) })
	select {
	case act := <-a.answer:
		return act
	case <-ctx.Done():
		return "cancel"
	}
}

func (a *asker) questions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

// A handler that asks the user (elicitation) and waits longer than its
// lease keeps the claim: the retry that arrives after the lease is told the
// call is in progress, never taken over, so the user is asked once and the
// transfer runs once. (Measured before: a 500 ms lease, a human who
// answered after 1.5 s, and the retry took the call over: asked twice,
// money wired twice.)
func testElicitationKeepsTheLease(t *testing.T, h Harness) {
	const lease = 300 * time.Millisecond
	var wired counter
	tool := Tool{Name: "wire_money", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		action, err := Elicit(ctx, fmt.Sprintf("Wire %v cents to %v?", args["cents"], args["to"]))
		if err != nil {
			return Result{}, err
		}
		if action != "accept" {
			return Result{Text: []string{"not wired: " + action}}, nil
		}
		return Result{Text: []string{fmt.Sprintf("wired (run %d)", wired.inc())}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, guardCfg: &idemkit.Config{Lease: lease}, tools: []Tool{tool}})
	user := newAsker()
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol, Elicit: user.elicit})
	args := map[string]any{"to": "bob", "cents": 25000}
	first := make(chan map[string]any, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "wire_money", args, nil)
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		first <- res
	}()
	<-user.waiting
	time.Sleep(3 * lease) // the human takes a while; the retry comes after the lease
	retry := call(t, c, "wire_money", args, nil)
	user.answer <- "accept"
	res := <-first
	if m := marker(retry, instrument.RefusalMetaKey); m["reason"] != sc.RefusalInProgress {
		t.Fatalf("the retry during the question: %v; want the in-progress answer", retry)
	}
	if text(res) != "wired (run 1)" || wired.get() != 1 || len(user.questions()) != 1 {
		t.Fatalf("first call %v; %d transfers, questions %q; want one question, one transfer", res, wired.get(), user.questions())
	}
	if rep := call(t, c, "wire_money", args, nil); text(rep) != "wired (run 1)" || marker(rep, instrument.ReplayMetaKey) == nil {
		t.Fatalf("after the answer: %v, want the replay", rep)
	}
}
