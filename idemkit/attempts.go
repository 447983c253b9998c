package idemkit

import (
	"errors"
	"fmt"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// ErrAttemptsExhausted is matched by the error Guard.Do returns, without
// running the work, for a call whose earlier attempts have failed (or
// crashed) as many times as its tool's ToolConfig.MaxAttempts allows: a
// poison call, which would otherwise be taken over and fail again with
// every retry until its window ends. The error's text is written for a
// model.
var ErrAttemptsExhausted = errors.New("idemkit: the call failed too many times to be tried again")

// attemptsExhaustedError is the error of ErrAttemptsExhausted.
type attemptsExhaustedError struct {
	// Tool is the tool of the call.
	Tool string
	// Attempts is how many attempts ran and failed.
	Attempts int
	// Max is the tool's MaxAttempts.
	Max int
}

func (e *attemptsExhaustedError) Error() string {
	return fmt.Sprintf("The %s call with these arguments has failed %d times and is not tried again. Nothing was done this time. "+
		"Do not retry it: tell the user that it keeps failing, and what you asked for, so that someone can look into it.", e.Tool, e.Attempts)
}

// Is reports whether target is ErrAttemptsExhausted.
func (e *attemptsExhaustedError) Is(target error) bool { return target == ErrAttemptsExhausted }

// exhausted handles a takeover claim cr that is over p's MaxAttempts: it
// releases the claim without running anything and returns the error.
// (Apart from Do, so that the common path stays as it is.)
func (g *Guard) exhausted(a *attempt, key *Key, p *toolPolicy, cr *idemstore.ClaimResult, token int64) error {
	fin := idemstore.FinishRequest{Key: key.id, Token: token, Handle: cr.Handle,
		Error: fmt.Sprintf("not run: attempt %d is over the limit of %d (ToolConfig.MaxAttempts); the earlier attempts failed", cr.Attempt, p.maxAttempts)}
	e := &attemptsExhaustedError{Tool: key.tool, Attempts: cr.Attempt - 1, Max: p.maxAttempts}
	if err := g.finish(a, &fin, e); err != nil {
		return err
	}
	return e
}
