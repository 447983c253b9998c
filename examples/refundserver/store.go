package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// openedStore is the idemkit store chosen by -store, with its Guard and
// the refund desk's database.
type openedStore struct {
	guard *idemkit.Guard
	db    *refunds.DB
	desc  string
	close func()
}

// openStore opens the idemkit store chosen by -store and the desk's
// database: with postgres, and with sqlite in the -db file (the default),
// the store's own (its tables beside idemkit's), so that issue_refund's
// refund row commits with the call's recorded outcome; with memory, or a
// -store-db apart, the SQLite file -db, where the row commits before the
// outcome is recorded (keyed by the gateway key, so a takeover finds it).
func openStore(ctx context.Context, o options) (*openedStore, error) {
	var (
		store idemstore.Store
		st    = &openedStore{close: func() {}}
		err   error
	)
	switch o.store {
	case "sqlite":
		s, err := sqlitestore.Open(ctx, o.storeDB, nil)
		if err != nil {
			return nil, err
		}
		if o.storeDB == o.dbPath {
			st.db, err = refunds.NewSQLiteDB(ctx, s.DB(), s.ReadDB())
			st.desc = "sqlite " + o.storeDB + " (refund rows commit with their outcomes)"
		} else {
			st.db, err = refunds.OpenDB(ctx, o.dbPath)
			st.desc = "sqlite " + o.storeDB + " (refund rows in " + o.dbPath + ", committed after their claims)"
		}
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		store, st.close = s, func() { _ = s.Close() }
	case "memory":
		if st.db, err = refunds.OpenDB(ctx, o.dbPath); err != nil {
			return nil, err
		}
		store, st.desc = &idemkit.MemoryStore{MaxRecords: o.memoryMaxRecords}, fmt.Sprintf("memory (lost on restart; at most %d records)", o.memoryMaxRecords)
	case "postgres":
		if o.pgDSN == "" {
			return nil, errors.New("-store postgres needs -postgres-dsn (or $DATABASE_URL)")
		}
		pool, err := pgxpool.New(ctx, o.pgDSN)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		s, err := pgstore.New(pool, nil)
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err == nil {
			st.db, err = refunds.NewPostgresDB(ctx, pool)
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres store: %w", err)
		}
		store, st.close, st.desc = s, pool.Close, "postgres (refund rows commit with their outcomes)"
	default:
		return nil, fmt.Errorf("-store %q: want sqlite, memory or postgres", o.store)
	}
	st.guard, err = idemkit.NewGuard(store, &idemkit.Config{Window: o.window, Lease: o.lease})
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}
