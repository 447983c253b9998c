// Package txtool adapts an instrument.TxRunner to the per-call machinery
// (mcpcall.TxRunner) for the transactional handler forms of every SDK
// adapter (mcpgo.AddTxTool, gosdk.AddTxTool): the claim runs in the
// store's transaction, and the handler finds the transaction in its
// context.
package txtool

import (
	"context"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// key carries a call's transaction of type T.
type key[T any] struct{}

// With returns ctx carrying tx.
func With[T any](ctx context.Context, tx T) context.Context {
	return context.WithValue(ctx, key[T]{}, tx)
}

// From returns the transaction of the tool call running in ctx.
func From[T any](ctx context.Context) (T, bool) {
	tx, ok := ctx.Value(key[T]{}).(T)
	return tx, ok
}

// Runner returns r as the machinery's TxRunner: the work it runs finds the
// transaction with From.
func Runner[T any](r instrument.TxRunner[T]) mcpcall.TxRunner { return runner[T]{r} }

type runner[T any] struct{ r instrument.TxRunner[T] }

func (a runner[T]) Claim(ctx context.Context, g *idemkit.Guard, k idemkit.Key, work idemkit.Work) (idemkit.Result, error) {
	var (
		ran     bool
		workErr error
	)
	res, err := a.r.DoInTx(ctx, g, k, func(ctx context.Context, tx T) (idemkit.Response, error) {
		ran = true
		resp, err := work(With(ctx, tx))
		workErr = err
		return resp, err
	})
	if err != nil && ran && workErr == nil {
		// The work succeeded, but its outcome or the commit failed: the
		// transaction rolled back, and nothing of the call remains.
		return idemkit.Result{}, fmt.Errorf("%w: %w", mcpcall.ErrRolledBack, err)
	}
	return res, err
}

func (a runner[T]) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	var fnErr error
	ran := false
	err := a.r.InTx(ctx, func(ctx context.Context, tx T) error {
		ran = true
		fnErr = fn(With(ctx, tx))
		return fnErr
	})
	if err != nil && ran && fnErr == nil {
		return fmt.Errorf("%w: %w", mcpcall.ErrRolledBack, err)
	}
	return err
}
