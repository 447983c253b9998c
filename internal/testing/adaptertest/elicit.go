package adaptertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	if m := marker(retry, sc.RefusalMetaKey); m["reason"] != sc.RefusalInProgress {
		t.Fatalf("the retry during the question: %v; want the in-progress answer", retry)
	}
	if text(res) != "wired (run 1)" || wired.get() != 1 || len(user.questions()) != 1 {
		t.Fatalf("first call %v; %d transfers, questions %q; want one question, one transfer", res, wired.get(), user.questions())
	}
	if rep := call(t, c, "wire_money", args, nil); text(rep) != "wired (run 1)" || marker(rep, sc.ReplayMetaKey) == nil {
		t.Fatalf("after the answer: %v, want the replay", rep)
	}
}

// scriptedUser answers each question with the next action sent on
// answers (cancelling after 10 s without one, so that a failing test ends).
type scriptedUser struct {
	mu      sync.Mutex // protects asked
	asked   []string
	askedCh chan string
	answers chan string
}

func newScriptedUser() *scriptedUser {
	return &scriptedUser{askedCh: make(chan string, 16), answers: make(chan string, 16)}
}

func (u *scriptedUser) elicit(ctx context.Context, message string) string {
	u.mu.Lock()
	u.asked = append(u.asked, message)
	u.mu.Unlock()
	u.askedCh <- message
	select {
	case a := <-u.answers:
		return a
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
	}
	return "cancel"
}

func (u *scriptedUser) questions() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.asked...)
}

// A human gate (instrument.WithConfirmation): the user is asked before an
// irreversible call runs, inside its claim. A duplicate during the
// question is in progress (never a second question, also after the
// lease); accept runs the work once; decline runs nothing, releases the
// claim and tells the model so; a call under the threshold is not asked; a
// client that cannot be asked is refused, unless the tool opts out.
func testHumanGate(t *testing.T, h Harness) {
	const lease = 300 * time.Millisecond
	var refunds, receipts counter
	refund := Tool{Name: "issue_refund", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{fmt.Sprintf("refunded %v on %v (run %d)", args["amount_cents"], args["order_id"], refunds.inc())}}, nil
	}}
	receipt := Tool{Name: "send_receipt", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{fmt.Sprintf("sent (run %d)", receipts.inc())}}, nil
	}}
	question := func(args json.RawMessage) (string, error) {
		var a struct {
			OrderID string `json:"order_id"`
			Amount  int64  `json:"amount_cents"`
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return "", err
		}
		if a.Amount < 10000 {
			return "", nil // small refunds need no confirmation
		}
		return fmt.Sprintf("Refund $%d.%02d on %s?", a.Amount/100, a.Amount%100, a.OrderID), nil
	}
	r := start(t, h, setup{transport: HTTP, bearer: true, guardCfg: &idemkit.Config{Lease: lease}, tools: []Tool{refund, receipt},
		opts: []instrument.Option{
			instrument.WithConfirmation("issue_refund", instrument.Confirmation{Question: question}),
			instrument.WithConfirmation("send_receipt", instrument.Confirmation{Question: func(json.RawMessage) (string, error) { return "Send the receipt?", nil }, Unasked: true}),
		}})
	user := newScriptedUser()
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol, Elicit: user.elicit})
	big := map[string]any{"order_id": "ord_1001", "amount_cents": 25000}

	// Accept, with a duplicate while the question is open.
	first := make(chan map[string]any, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "issue_refund", big, nil)
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		first <- res
	}()
	if q := <-user.askedCh; q != "Refund $250.00 on ord_1001?" {
		t.Fatalf("question %q", q)
	}
	time.Sleep(2 * lease) // the user thinks past the lease
	dup := call(t, c, "issue_refund", big, nil)
	if m := marker(dup, sc.RefusalMetaKey); m["reason"] != sc.RefusalInProgress {
		t.Fatalf("duplicate during the question: %v, want in progress", dup)
	}
	user.answers <- "accept"
	res := <-first
	if text(res) != "refunded 25000 on ord_1001 (run 1)" || refunds.get() != 1 || len(user.questions()) != 1 {
		t.Fatalf("accepted call %v, %d refunds, questions %q; want one question, one refund", res, refunds.get(), user.questions())
	}
	if rep := call(t, c, "issue_refund", big, nil); marker(rep, sc.ReplayMetaKey) == nil || len(user.questions()) != 1 {
		t.Fatalf("the duplicate after the answer: %v (questions %q); want the replay, unasked", rep, user.questions())
	}

	// Decline: nothing runs, the model is told; asking again is possible.
	other := map[string]any{"order_id": "ord_1002", "amount_cents": 50000}
	user.answers <- "decline"
	declined := call(t, c, "issue_refund", other, nil)
	if m := marker(declined, sc.RefusalMetaKey); !isError(declined) || m["reason"] != sc.RefusalDeclined ||
		!strings.Contains(text(declined), "declined") || !strings.Contains(text(declined), "Nothing was done") || refunds.get() != 1 {
		t.Fatalf("declined call: %v, %d refunds; want the declined refusal and no refund", declined, refunds.get())
	}
	user.answers <- "accept"
	if again := call(t, c, "issue_refund", other, nil); text(again) != "refunded 50000 on ord_1002 (run 2)" || len(user.questions()) != 3 {
		t.Fatalf("asking again after the decline: %v, questions %q", again, user.questions())
	}
	// Under the threshold: not asked.
	if small := call(t, c, "issue_refund", map[string]any{"order_id": "ord_1003", "amount_cents": 500}, nil); text(small) != "refunded 500 on ord_1003 (run 3)" || len(user.questions()) != 3 {
		t.Fatalf("small refund: %v, questions %q; want it run unasked", small, user.questions())
	}

	// A client that cannot be asked is refused; the opted-out tool runs.
	mute := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	refused := call(t, mute, "issue_refund", map[string]any{"order_id": "ord_1004", "amount_cents": 30000}, nil)
	if m := marker(refused, sc.RefusalMetaKey); !isError(refused) || m["reason"] != sc.RefusalConfirmationUnavailable || refunds.get() != 3 {
		t.Fatalf("client without elicitation: %v, %d refunds; want the refusal and no refund", refused, refunds.get())
	}
	if sent := call(t, mute, "send_receipt", map[string]any{"order_id": "ord_1001"}, nil); text(sent) != "sent (run 1)" {
		t.Fatalf("opted-out tool without elicitation: %v, want it run", sent)
	}

	// The spans record the answers; a declined call ran nothing.
	spans := r.waitSpans("tools/call issue_refund", 7)
	want := []struct {
		confirm, outcome, refusal any
	}{
		{absent, nil, sc.RefusalInProgress}, {"accept", sc.OutcomeExecuted, absent}, {absent, sc.OutcomeReplayed, absent},
		{"decline", absent, sc.RefusalDeclined}, {"accept", sc.OutcomeTakeover, absent}, {absent, sc.OutcomeExecuted, absent},
		{"unavailable", absent, sc.RefusalConfirmationUnavailable},
	}
	for i, s := range spans {
		w := map[string]any{"idemkit.confirmation": want[i].confirm, sc.RefusalReason: want[i].refusal}
		if want[i].outcome != nil {
			w[sc.Outcome] = want[i].outcome
		}
		if d := hasAttrs(s, w); d != "" {
			t.Errorf("span %d: %s", i, d)
		}
	}
	if d := hasAttrs(r.waitSpans("tools/call send_receipt", 1)[0], map[string]any{"idemkit.confirmation": "unasked", sc.Outcome: sc.OutcomeExecuted}); d != "" {
		t.Errorf("opted-out tool's span: %s", d)
	}
}
