package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// A human gate (Config.Confirm): before a tool's irreversible work runs,
// the user is asked through MCP elicitation. The question is asked inside
// the claim, so that a duplicate that arrives while it is open gets the
// in-progress answer (never a second question), and the claim's lease is
// kept while the user thinks (idemkit.Call.KeepAlive). Decline releases the
// claim and runs nothing; accept runs the work once.

// Refusal reasons of the gate (idemkit.refusal.reason and the
// RefusalMetaKey marker's reason).
const (
	// RefusalDeclined: the user declined (or dismissed) the confirmation;
	// nothing was done.
	RefusalDeclined = spancontract.RefusalDeclined
	// RefusalConfirmationUnavailable: the tool needs a confirmation and the
	// client cannot ask the user (no elicitation capability), or asking
	// failed; nothing was done.
	RefusalConfirmationUnavailable = spancontract.RefusalConfirmationUnavailable
)

// ConfirmationAttr (string) records on a tools/call span what the gate's
// question came to: "accept", "decline", "cancel", "unavailable" (the
// client cannot be asked), or "unasked" (it cannot, and the tool runs
// anyway: Confirmation.Unasked).
const ConfirmationAttr = "idemkit.confirmation"

// Confirmation is the human gate of one tool.
type Confirmation struct {
	// Question returns the question to ask the user before a call with
	// args (the raw JSON arguments) runs, such as "Refund $250.00 on
	// ord_1001?", or "" when the call needs none (an amount under a
	// threshold). An error refuses the call as invalid arguments, with
	// nothing run.
	Question func(args json.RawMessage) (string, error)
	// Unasked runs the tool without a question for a client that cannot be
	// asked (it did not declare the elicitation capability). Unset, such a
	// call is refused: nothing runs unconfirmed.
	Unasked bool
}

// Elicitor asks the user of the client that sent a call (MCP
// elicitation). Front ends provide it in ToolCall.Elicit.
type Elicitor interface {
	// CanElicit reports whether the client declared the elicitation
	// capability.
	CanElicit() bool
	// Confirm asks message as a yes-or-no question (a form with no fields)
	// and returns the user's action: "accept", "decline" or "cancel".
	Confirm(ctx context.Context, message string) (string, error)
}

// Gates reports whether tool has a human gate (the front end then provides
// ToolCall.Elicit).
func (in *Instrumenter) Gates(tool string) bool {
	_, ok := in.cfg.Confirm[tool]
	return ok
}

// gate is a call's pending question.
type gate struct {
	tool, question string
	elicit         Elicitor
}

// gateError ends a gated call's work without running it.
type gateError struct {
	reason, text, action string
	err                  error
}

func (e *gateError) Error() string { return e.text }
func (e *gateError) Unwrap() error { return e.err }

// gateOf returns the question call must get before it runs (nil when
// none), or the refusal (reason, text) that answers it without a claim.
func (in *Instrumenter) gateOf(call *ToolCall, c *callFacts) (g *gate, reason, text string) {
	conf, ok := in.cfg.Confirm[call.Tool]
	if !ok || conf.Question == nil {
		return nil, "", ""
	}
	q, err := conf.Question(call.Arguments)
	switch {
	case err != nil:
		return nil, spancontract.RefusalInvalidArguments, rejectedText(call.Tool, err)
	case q == "":
		return nil, "", ""
	case call.Elicit == nil || !call.Elicit.CanElicit():
		if conf.Unasked {
			c.confirm = "unasked"
			return nil, "", ""
		}
		c.confirm = "unavailable"
		return nil, RefusalConfirmationUnavailable, fmt.Sprintf("The %s tool needs the user's confirmation before it runs, and this client cannot ask the user "+
			"(it did not declare the MCP elicitation capability). Nothing was done. Ask the user in the conversation whether to go ahead, "+
			"and use a client that supports elicitation to run %s.", call.Tool, call.Tool)
	}
	return &gate{tool: call.Tool, question: q, elicit: call.Elicit}, "", ""
}

// ask asks the question while keeping the claim's lease, and returns nil
// when the user accepted, a *gateError otherwise.
func (g *gate) ask(ctx context.Context, c *callFacts) error {
	var action string
	err := idemkit.CallFromContext(ctx).KeepAlive(ctx, func(ctx context.Context) error {
		var err error
		action, err = g.elicit.Confirm(ctx, g.question)
		return err
	})
	if err != nil {
		c.confirm = "unavailable"
		return &gateError{reason: RefusalConfirmationUnavailable, action: "unavailable", err: err, text: fmt.Sprintf(
			"The confirmation of the %s call could not be asked (%v). Nothing was done; call %s again to ask the user again.", g.tool, err, g.tool)}
	}
	c.confirm = action
	switch action {
	case "accept":
		return nil
	case "decline":
		return &gateError{reason: RefusalDeclined, action: action, text: fmt.Sprintf(
			"The user declined the %s call when asked %q. Nothing was done. Do not call %s again unless the user asks for it again.", g.tool, g.question, g.tool)}
	}
	return &gateError{reason: RefusalDeclined, action: action, text: fmt.Sprintf(
		"The user dismissed the confirmation of the %s call (%q) without answering. Nothing was done. Ask the user whether to go ahead before calling %s again.", g.tool, g.question, g.tool)}
}

// isGateError reports whether err ended a gated call unrun.
func asGateError(err error) (*gateError, bool) {
	var ge *gateError
	return ge, errors.As(err, &ge)
}
