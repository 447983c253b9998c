package instrument

import (
	"context"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// PhasedRunner is a store that runs a tool call in atomic phases (see
// idemkit.Guard.DoPhased): the claim commits on its own, the tool's
// external work (a payment, a call to another service) runs outside any
// transaction, and the tool's local writes and the recorded outcome then
// commit together in one short transaction. *pgstore.Store is a
// PhasedRunner[pgx.Tx] and *sqlitestore.Store a PhasedRunner[*sql.Tx]. The
// phased handler forms, mcpgo.AddPhasedTool and gosdk.AddPhasedTool, take
// one.
type PhasedRunner[T any] interface {
	// BeginLocal begins the transaction of a call's local phase: tx for
	// the tool's writes, and lt for the Guard, which records the call's
	// outcome in it and commits it (see sqlitestore.Store.BeginLocal).
	BeginLocal(ctx context.Context) (tx T, lt idemstore.LocalTx, err error)
}
