package agent

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Scenario is one situation in which an agent sends a tool call twice (or,
// for the control scenarios, sends two calls that are not duplicates), with
// what it must produce on a protected and on an unprotected server.
type Scenario struct {
	Name  string
	Layer string // the cause the dup processor must name; "" for no duplicate
	Title string
	Order string // the order it refunds; each scenario has its own
	// Protected and Unprotected are the expected outcomes on each server.
	Protected, Unprotected Expectation
	run                    func(ctx context.Context, se *session) error
}

// Scenarios returns the demo's scenarios, in the order they run: one per
// layer that duplicates tool calls, then two controls that must not be
// flagged.
func Scenarios() []*Scenario {
	one := func(cause, effect string) []Dup { return []Dup{{Cause: cause, Effect: effect}} }
	return []*Scenario{
		{
			Name: sc.CauseTransportRetry, Layer: sc.CauseTransportRetry, Order: "ord_1001",
			Title:     "a proxy re-POSTs the same JSON-RPC request after a connection reset",
			Protected: Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: one(sc.CauseTransportRetry, sc.EffectSuppressed)},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 1,
				Duplicates: one(sc.CauseTransportRetry, sc.EffectLeaked)},
			run: transportRetry,
		},
		{
			Name: sc.CauseHarnessRetry, Layer: sc.CauseHarnessRetry, Order: "ord_1004",
			Title:     "the harness times out on a slow refund and retries at once",
			Protected: Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: one(sc.CauseHarnessRetry, sc.EffectBlocked)},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 1,
				Duplicates: one(sc.CauseHarnessRetry, sc.EffectLeaked)},
			run: harnessRetry,
		},
		{
			Name: sc.CauseModelReissue, Layer: sc.CauseModelReissue, Order: "ord_1002",
			Title:     "the model loses the result to context compaction and calls again",
			Protected: Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: one(sc.CauseModelReissue, sc.EffectSuppressed)},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 1,
				Duplicates: one(sc.CauseModelReissue, sc.EffectLeaked)},
			run: modelReissue,
		},
		{
			Name: sc.CauseReconnectReplay, Layer: sc.CauseReconnectReplay, Order: "ord_1003",
			Title:     "the stream breaks; the MCP client reconnects on a new session and replays the call",
			Protected: Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: one(sc.CauseReconnectReplay, sc.EffectSuppressed)},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 1,
				Duplicates: one(sc.CauseReconnectReplay, sc.EffectLeaked)},
			run: reconnectReplay,
		},
		{
			Name: "task_retry", Layer: sc.CauseHarnessRetry, Order: "ord_1009",
			Title: "the agent runs the refund as an MCP task; the connection drops before the task's handle arrives, and the harness retries at once",
			// Protected: the retry gets the first call's task back
			// (idemkit replays its CreateTaskResult); one refund.
			Protected: Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: one(sc.CauseHarnessRetry, sc.EffectSuppressed)},
			// Unprotected: mcp-go makes a second task, which refunds again.
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 1,
				Duplicates: one(sc.CauseHarnessRetry, sc.EffectLeaked)},
			run: taskRetry,
		},
		{
			Name: "deliberate_repeat", Order: "ord_1005",
			Title:       "the customer asks for a second, smaller refund of the same order (different arguments)",
			Protected:   Expectation{Requests: 2, Writes: 2, Intended: 2},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 2},
			run:         deliberateRepeat,
		},
		{
			Name: "key_reuse", Order: "ord_1006",
			Title: "the agent reuses an explicit idempotency_key for a different refund",
			// Protected: the reused key is rejected (outcome mismatch, not a
			// duplicate) and the agent re-sends with a new key, as the
			// answer tells it to.
			Protected:   Expectation{Requests: 3, Writes: 2, Intended: 2},
			Unprotected: Expectation{Requests: 2, Writes: 2, Intended: 2},
			run:         keyReuse,
		},
	}
}

func selectScenarios(names []string) ([]*Scenario, error) {
	all := Scenarios()
	if len(names) == 0 {
		return all, nil
	}
	var out []*Scenario
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n {
				out, found = append(out, s), true
			}
		}
		if !found {
			return nil, fmt.Errorf("agent: no scenario %q", n)
		}
	}
	return out, nil
}

func refundArgs(order string, cents int) map[string]any {
	return map[string]any{"order_id": order, "amount_cents": cents}
}

// decide is the model reading the order and deciding to refund.
func decide(ctx context.Context, se *session, cents int) map[string]any {
	args := refundArgs(se.rec.OrderID, cents)
	se.chat(ctx, 60*time.Millisecond, fmt.Sprintf("The customer is owed $%d.%02d on %s: call issue_refund.", cents/100, cents%100, se.rec.OrderID))
	return args
}

// expectOK fails the scenario when a call that must succeed did not.
func expectOK(res *Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if res.IsError {
		return fmt.Errorf("%s: the server answered with an error: %s", what, res.Text)
	}
	return nil
}

// transportRetry: same session, same JSON-RPC id, POSTed twice by the
// infrastructure below the client. The agent sees one call.
func transportRetry(ctx context.Context, se *session) error {
	args := decide(ctx, se, 2500)
	se.note("network", "the proxy between agent and server will reset the connection after the server answers, then retry the POST")
	res, err := se.call(WithFault(ctx, ResetThenRetry), "issue_refund", args)
	return expectOK(res, err, "issue_refund")
}

// harnessRetry: same session, a new request ID milliseconds later, no
// model output in between. The first attempt times out on the client while
// the slow gateway is still working; the harness retries once.
func harnessRetry(ctx context.Context, se *session) error {
	args := decide(ctx, se, 2500)
	var (
		res *Result
		err error
	)
	for attempt := 1; attempt <= 2; attempt++ {
		actx, cancel := context.WithTimeout(ctx, se.cfg.HarnessTimeout)
		res, err = se.call(actx, "issue_refund", args)
		cancel()
		if err == nil {
			break
		}
		if attempt == 1 {
			se.note("harness", fmt.Sprintf("attempt 1 raised (%s timeout); retry policy: try again in %s", se.cfg.HarnessTimeout, se.cfg.HarnessBackoff))
			time.Sleep(se.cfg.HarnessBackoff)
		}
	}
	switch {
	case err != nil:
		se.note("harness", "attempt 2 raised too: the harness reports the refund as failed")
	case res.IsError:
		se.chat(ctx, 60*time.Millisecond, "The server says the refund is already in progress and not to retry: check get_refund_status instead.")
	}
	time.Sleep(se.cfg.StatusWait)
	status, err := se.call(ctx, "get_refund_status", map[string]any{"order_id": se.rec.OrderID})
	return expectOK(status, err, "get_refund_status")
}

// modelReissue: same session, a new request ID, a chat span in between and
// a gap of seconds. The result of the first call was lost to the model.
func modelReissue(ctx context.Context, se *session) error {
	args := decide(ctx, se, 2500)
	res, err := se.call(ctx, "issue_refund", args)
	if err := expectOK(res, err, "issue_refund"); err != nil {
		return err
	}
	se.note("harness", "the conversation is compacted: the tool result is dropped from the model's context")
	se.chat(ctx, se.cfg.ReissueThink, "I see no confirmation that the refund went through: call issue_refund again.")
	res, err = se.call(ctx, "issue_refund", args)
	return expectOK(res, err, "issue_refund (re-issued)")
}

// reconnectReplay: the stream breaks before the answer arrives; the MCP
// client opens a new session and re-sends the call that had no answer.
func reconnectReplay(ctx context.Context, se *session) error {
	args := decide(ctx, se, 2500)
	se.note("network", "the connection will be reset after the server answers")
	res, err := se.call(WithFault(ctx, Reset), "issue_refund", args)
	if err == nil {
		return fmt.Errorf("issue_refund: expected the injected connection reset, got %q", res.Text)
	}
	if !isNetworkError(err) {
		return fmt.Errorf("issue_refund: %w", err)
	}
	se.note("mcp-client", "the stream broke with a request unanswered: reconnect on a new session and re-send it")
	if err := se.connect(ctx); err != nil {
		return fmt.Errorf("reconnect: %w", err)
	}
	res, err = se.call(ctx, "issue_refund", args)
	return expectOK(res, err, "issue_refund (replayed after the reconnect)")
}

// deliberateRepeat: two refunds of one order that differ in amount: two
// intended actions, never a duplicate.
func deliberateRepeat(ctx context.Context, se *session) error {
	res, err := se.call(ctx, "issue_refund", decide(ctx, se, 2500))
	if err := expectOK(res, err, "issue_refund"); err != nil {
		return err
	}
	se.chat(ctx, 150*time.Millisecond, "The customer also wants the $10.00 shipping fee back: a second refund, for $10.00.")
	res, err = se.call(ctx, "issue_refund", refundArgs(se.rec.OrderID, 1000))
	return expectOK(res, err, "issue_refund (second refund)")
}

// keyReuse: the agent passes an explicit idempotency_key, then wrongly
// reuses it for a different refund. idemkit rejects the reuse (nothing is
// run) and says to send a new key; the agent does.
func keyReuse(ctx context.Context, se *session) error {
	k1 := "rk-" + randomHex(6)
	args := decide(ctx, se, 2000)
	args["idempotency_key"] = k1
	res, err := se.call(ctx, "issue_refund", args)
	if err := expectOK(res, err, "issue_refund"); err != nil {
		return err
	}
	se.chat(ctx, 150*time.Millisecond, "The customer also wants $30.00 for the damaged box: refund it (reusing the key by mistake).")
	second := refundArgs(se.rec.OrderID, 3000)
	second["idempotency_key"] = k1
	res, err = se.call(ctx, "issue_refund", second)
	if err != nil {
		return fmt.Errorf("issue_refund (reused key): %w", err)
	}
	if !res.IsError {
		return nil // no idemkit: the server knows nothing of keys
	}
	if !strings.Contains(res.Text, "idempotency key") {
		return fmt.Errorf("issue_refund (reused key): unexpected error: %s", res.Text)
	}
	se.chat(ctx, 100*time.Millisecond, "The key was already used for another refund: send this new refund with a new key.")
	second["idempotency_key"] = "rk-" + randomHex(6)
	res, err = se.call(ctx, "issue_refund", second)
	return expectOK(res, err, "issue_refund (new key)")
}

// taskRetry: the refund runs as an MCP task (a task-augmented tools/call,
// MCP 2025-11-25). The connection drops after the server answered with the
// task's handle; the harness retries the call at once, on the same session
// (a new request ID, no model output in between), then polls the task it
// got back and fetches its result.
func taskRetry(ctx context.Context, se *session) error {
	args := decide(ctx, se, 2500)
	se.note("network", "the connection will be reset after the server answers: the task's handle (its CreateTaskResult) is lost")
	if _, _, err := se.callTask(WithFault(ctx, Reset), "issue_refund", args); err == nil {
		return fmt.Errorf("issue_refund as a task: expected the injected connection reset")
	} else if !isNetworkError(err) {
		return fmt.Errorf("issue_refund as a task: %w", err)
	}
	se.note("harness", "attempt 1 raised (connection reset); retry policy: send the task-augmented call again at once")
	id, _, err := se.callTask(ctx, "issue_refund", args)
	if err != nil {
		return fmt.Errorf("issue_refund as a task (retried): %w", err)
	}
	res, status, err := se.waitTask(ctx, id)
	if err := expectOK(res, err, "the refund task "+id); err != nil {
		return err
	}
	se.note("mcp-client", "task "+id+" "+status+": "+res.Text)
	return nil
}

// callTask sends one task-augmented tools/call on the current session and
// records it as a call.
func (se *session) callTask(ctx context.Context, tool string, args map[string]any) (string, bool, error) {
	st := Step{Kind: "call", Tool: tool, Args: maps.Clone(args), Session: se.conn.SessionID()}
	id, replayed, err := se.conn.callTask(ctx, tool, args)
	if err != nil {
		st.Error = err.Error()
	} else {
		st.Result = &Result{Text: "task " + id + " (working)", Replayed: replayed}
	}
	se.step(st)
	return id, replayed, err
}

// waitTask polls a task until it ends and returns its result.
func (se *session) waitTask(ctx context.Context, id string) (*Result, string, error) {
	return se.conn.waitTask(ctx, id, 50*time.Millisecond)
}
