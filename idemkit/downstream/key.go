package downstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// ErrNoCall is returned by the helpers that need a downstream key when ctx
// carries no protected call (idemkit.CallFromContext is nil): the tool runs
// unprotected, or the context is not the one the Guard gave the work. A
// helper never invents a key, which would deduplicate nothing.
var ErrNoCall = errors.New("downstream: no protected call in the context: use the context idemkit gave the tool's work (the call is not protected, or the context was replaced)")

type nameKey struct{}

// WithName returns a copy of ctx whose downstream key, resource IDs and
// markers are scoped to name, for a tool that makes several different
// writes in one call (create a customer, then charge it): each named write
// gets a key of its own, the same on every attempt of the record. Names
// nest: WithName(WithName(ctx, "a"), "b") is scoped to "a" then "b". An
// empty name leaves ctx as it is.
func WithName(ctx context.Context, name string) context.Context {
	if name == "" {
		return ctx
	}
	if prev, ok := ctx.Value(nameKey{}).(string); ok {
		name = prev + "\x00" + name
	}
	return context.WithValue(ctx, nameKey{}, name)
}

// Key returns the downstream key of the call running in ctx: its
// idemkit.Call.IdempotencyKey or, under WithName, that key followed by "."
// and 12 hex characters of a hash of the name. It returns ErrNoCall
// outside a protected call.
func Key(ctx context.Context) (string, error) {
	k := idemkit.CallFromContext(ctx).IdempotencyKey()
	if k == "" {
		return "", ErrNoCall
	}
	if name, ok := ctx.Value(nameKey{}).(string); ok {
		sum := sha256.Sum256([]byte("idemkit downstream name\x00" + name))
		k += "." + hex.EncodeToString(sum[:6])
	}
	return k, nil
}
