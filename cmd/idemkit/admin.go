package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

func newMigrateCmd() *cobra.Command {
	var store string
	c := &cobra.Command{
		Use:   "migrate --store URL",
		Short: "Create or upgrade a store's schema",
		Long: `migrate applies the schema migrations this idemkit embeds that the store has
not applied yet, and prints the schema version. It is safe to run from many
replicas at once and on every deploy: a store already up to date is left
alone. The gateway applies SQLite migrations itself; a Postgres store must
be migrated first (or the gateway started with --migrate).`,
		Example: `  idemkit migrate --store sqlite:/var/lib/idemkit/idemkit.db
  idemkit migrate --store postgres://idemkit@db.internal:5432/idemkit`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			u, err := parseStoreURL(store)
			if err != nil {
				return err
			}
			if u.kind == kindMemory {
				return usagef("--store memory has no schema to migrate: name a sqlite: or postgres: store")
			}
			st, err := openStore(c.Context(), store, openOptions{})
			if err != nil {
				return err
			}
			defer st.Close()
			before, err := st.version(c.Context())
			if err != nil {
				return fmt.Errorf("read the schema version of the %s store: %w", st.url, err)
			}
			after, err := st.migrate(c.Context())
			if err != nil {
				return fmt.Errorf("migrate the %s store: %w", st.url, err)
			}
			if after == before {
				fmt.Fprintf(c.OutOrStdout(), "%s: schema at version %d, up to date\n", st.url, after)
			} else {
				fmt.Fprintf(c.OutOrStdout(), "%s: schema migrated from version %d to %d\n", st.url, before, after)
			}
			return nil
		},
	}
	c.Flags().StringVar(&store, "store", "", storeHelp)
	return c
}

func newSweepCmd() *cobra.Command {
	var (
		store string
		batch int
	)
	c := &cobra.Command{
		Use:   "sweep --store URL",
		Short: "Delete expired idempotency records",
		Long: `sweep deletes the records whose window is over and whose lease is not live,
in batches, and prints how many it deleted. Run it from cron or a scheduler
(every few minutes is plenty); many sweeps may run at once. Expired records
never block new calls (a claim replaces them), so sweeping only reclaims
space.`,
		Example: `  idemkit sweep --store sqlite:/var/lib/idemkit/idemkit.db
  idemkit sweep --store postgres://idemkit@db.internal:5432/idemkit --batch 5000`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			u, err := parseStoreURL(store)
			if err != nil {
				return err
			}
			if u.kind == kindMemory {
				return usagef("--store memory lives inside one process: there is nothing to sweep from the command line; name a sqlite: or postgres: store")
			}
			if batch <= 0 {
				return usagef("--batch must be positive, got %d", batch)
			}
			st, err := openStore(c.Context(), store, openOptions{})
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.requireSchema(c.Context()); err != nil {
				return err
			}
			g, err := idemkit.NewGuard(st.Store, &idemkit.Config{SweepBatch: batch})
			if err != nil {
				return err
			}
			start := time.Now()
			n, err := g.Sweep(c.Context())
			if err != nil {
				return fmt.Errorf("sweep the %s store (deleted %d records before the failure): %w", st.url, n, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: deleted %d expired records in %s\n", st.url, n, time.Since(start).Round(time.Millisecond))
			return nil
		},
	}
	c.Flags().StringVar(&store, "store", "", storeHelp)
	c.Flags().IntVar(&batch, "batch", idemkit.DefaultSweepBatch, "records deleted per statement")
	return c
}
