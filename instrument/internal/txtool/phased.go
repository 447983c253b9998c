package txtool

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// Phased returns r as the machinery's TxRunner for a phased tool
// (mcpgo.AddPhasedTool, gosdk.AddPhasedTool): a protected call runs under
// the Guard's DoPhased, its local phase (Local) in a transaction of r in
// which the Guard records the outcome; a call without a claim (unprotected,
// or a task's work) runs its local phase in a transaction of its own.
func Phased[T any](r instrument.PhasedRunner[T]) mcpcall.TxRunner { return phased[T]{r} }

type phased[T any] struct{ r instrument.PhasedRunner[T] }

// slot carries a protected phased call's local transaction, once begun,
// and the Guard's beginLocal to the handler.
type slot[T any] struct {
	tx    T
	begin func(context.Context) error
}

type slotKey[T any] struct{}

func (p phased[T]) Claim(ctx context.Context, g *idemkit.Guard, k idemkit.Key, work idemkit.Work) (idemkit.Result, error) {
	sl := new(slot[T])
	ctx = context.WithValue(ctx, slotKey[T]{}, sl)
	begin := func(ctx context.Context) (idemstore.LocalTx, error) {
		tx, lt, err := p.r.BeginLocal(ctx)
		if err != nil {
			return nil, err
		}
		sl.tx = tx
		return lt, nil
	}
	var (
		ran     bool
		workErr error
	)
	res, err := g.DoPhased(ctx, k, begin, func(ctx context.Context, beginLocal func(context.Context) error) (idemkit.Response, error) {
		ran = true
		sl.begin = beginLocal
		resp, err := work(ctx)
		workErr = err
		return resp, err
	})
	switch {
	case err == nil || !ran || errors.Is(err, mcpcall.ErrLocalRolledBack):
	case workErr == nil && !errors.Is(err, idemkit.ErrResponseTooLarge):
		// The work returned its result, but the local transaction did
		// not commit (the outcome could not be recorded, the commit
		// failed, or another attempt took the claim over): none of its
		// writes remain.
		return idemkit.Result{}, fmt.Errorf("%w: %w", mcpcall.ErrLocalRolledBack, err)
	}
	return res, err
}

// Run runs fn without a claim: the handler's local phase (Local) begins and
// commits a transaction of its own.
func (p phased[T]) Run(ctx context.Context, fn func(ctx context.Context) error) error { return fn(ctx) }

// Local runs fn, a phased tool's local phase, for the call running in ctx:
// in the transaction of the call's DoPhased when the call is protected (the
// Guard records the outcome in it and commits it after the handler
// returns), otherwise in a transaction of its own, begun on r and
// committed here. An error that fn did not return (the transaction could
// not begin or commit) matches mcpcall.ErrLocalRolledBack.
func Local[T any](ctx context.Context, r instrument.PhasedRunner[T], fn func(ctx context.Context, tx T) error) error {
	if sl, ok := ctx.Value(slotKey[T]{}).(*slot[T]); ok && sl.begin != nil {
		if c := idemkit.CallFromContext(ctx); c != nil {
			if err := sl.begin(ctx); err != nil {
				return fmt.Errorf("%w: %w", mcpcall.ErrLocalRolledBack, err)
			}
			return fn(ctx, sl.tx)
		}
	}
	tx, lt, err := r.BeginLocal(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", mcpcall.ErrLocalRolledBack, err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = lt.Rollback(ctx)
		return err
	}
	if err := lt.Commit(ctx); err != nil {
		_ = lt.Rollback(ctx)
		return fmt.Errorf("%w: %w", mcpcall.ErrLocalRolledBack, err)
	}
	return nil
}
