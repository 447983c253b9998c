package instrument

import (
	"encoding/json"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// Confirmation is a human gate on a tool: see WithConfirmation.
type Confirmation struct {
	// Question returns the question to ask before a call with args (its
	// raw JSON arguments) runs ("Refund $250.00 on ord_1001?"), or "" when
	// this call needs none (an amount under your threshold). An error
	// refuses the call as invalid arguments, with nothing run. Required.
	Question func(args json.RawMessage) (string, error)
	// Unasked runs the tool without a question for a client that cannot be
	// asked (one that did not declare the MCP elicitation capability).
	// Defaults to false: such a call is refused with
	// spancontract.RefusalConfirmationUnavailable and a text that tells the model to ask
	// the user in the conversation; nothing runs unconfirmed.
	Unasked bool
}

// WithConfirmation puts a human gate on tool, for irreversible and
// expensive actions: before a call runs, the user is asked c.Question
// through MCP elicitation (a form with no fields: accept or decline).
//
//   - The question is asked inside the call's claim: a duplicate that
//     arrives while it is open gets the in-progress answer, never a second
//     question, and the claim's lease is kept alive while the user thinks.
//   - Accept: the tool runs, once; its result is stored and replayed as
//     for any protected call.
//   - Decline or dismiss: nothing runs; the claim is released (a later
//     call asks again); the model is told that the user declined and not to
//     call the tool again unless the user asks (spancontract.RefusalDeclined);
//     idemkit.confirmation on the span records the answer.
//   - A client without the elicitation capability is refused
//     (spancontract.RefusalConfirmationUnavailable), unless c.Unasked.
//
// It applies to protected calls (a tool that is not protected is not
// gated). On mcp-go a client that negotiated protocol 2026-07-28, which
// has no server-to-client requests, cannot be asked: such a call is
// refused (or runs unasked with c.Unasked). The idemkit gateway has no
// gate yet. Defaults to no gate.
func WithConfirmation(tool string, c Confirmation) Option {
	return optionFunc(func(cfg *mcpcall.Config) {
		if cfg.Confirm == nil {
			cfg.Confirm = make(map[string]mcpcall.Confirmation)
		}
		cfg.Confirm[tool] = mcpcall.Confirmation{Question: c.Question, Unasked: c.Unasked}
	})
}
