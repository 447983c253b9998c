package instrument_test

import (
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
)

// Both SQL stores run phased tools.
var (
	_ instrument.PhasedRunner[pgx.Tx]  = (*pgstore.Store)(nil)
	_ instrument.PhasedRunner[*sql.Tx] = (*sqlitestore.Store)(nil)
)
