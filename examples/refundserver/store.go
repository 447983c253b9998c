package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemkit/pgstore"
	"github.com/idemkit/idemkit/idemkit/sqlitestore"
)

// openGuard opens the idemkit store chosen by -store and returns a Guard on
// it, the function that closes the store, and a description for the log.
func openGuard(ctx context.Context, o options) (*idemkit.Guard, func(), string, error) {
	var (
		store   idemkit.Store
		closeFn = func() {}
		desc    string
	)
	switch o.store {
	case "sqlite":
		s, err := sqlitestore.Open(ctx, o.storeDB, nil)
		if err != nil {
			return nil, nil, "", err
		}
		store, closeFn, desc = s, func() { _ = s.Close() }, "sqlite "+o.storeDB
	case "memory":
		store, desc = &idemkit.MemoryStore{}, "memory (lost on restart)"
	case "postgres":
		if o.pgDSN == "" {
			return nil, nil, "", errors.New("-store postgres needs -postgres-dsn (or $DATABASE_URL)")
		}
		pool, err := pgxpool.New(ctx, o.pgDSN)
		if err != nil {
			return nil, nil, "", fmt.Errorf("postgres: %w", err)
		}
		s, err := pgstore.New(pool, nil)
		if err == nil {
			err = s.Migrate(ctx)
		}
		if err != nil {
			pool.Close()
			return nil, nil, "", fmt.Errorf("postgres store: %w", err)
		}
		store, closeFn, desc = s, pool.Close, "postgres"
	default:
		return nil, nil, "", fmt.Errorf("-store %q: want sqlite, memory or postgres", o.store)
	}
	guard, err := idemkit.NewGuard(store, &idemkit.Config{Window: o.window})
	if err != nil {
		closeFn()
		return nil, nil, "", err
	}
	return guard, closeFn, desc, nil
}
