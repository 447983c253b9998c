package mcpcall

import (
	"errors"

	"github.com/idemkit-mcp/idemkit/internal/runs"
)

// Owns reports whether taskID names a task that t keeps for op's caller
// (see ScopeOf), so that a front end that relays another server's tasks as
// well as serving its own (the idemkit gateway) knows which requests to
// answer itself. An unidentified caller owns none. The error is the
// store's.
func (t *Tasks) Owns(op *Op, taskID string) (bool, error) {
	sc := op.Scope()
	if taskID == "" || (sc.Kind == ScopeNone && t.in.cfg.Unscoped != UnscopedShare) {
		return false, nil
	}
	_, err := t.e.Get(op, sc.Value, taskID, false)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, runs.ErrNotFound):
		return false, nil
	}
	return false, err
}
