// Package sqlitestore is an idemstore.Store kept in an embedded SQLite
// database: durable idempotency for single-node and stdio MCP servers, with
// no database server to run. A resumed client that replays its calls after
// a restart gets the stored responses back instead of a second run of the
// side effects.
//
// It uses modernc.org/sqlite, a pure-Go SQLite (no cgo), with the database
// in WAL mode in a single file:
//
//	store, err := sqlitestore.Open(ctx, "state/idemkit.db", nil) // creates and migrates
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//	guard, err := idemkit.NewGuard(store, nil)
//	...
//	res, err := guard.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
//		return issueRefund(ctx, order)
//	})
//
// When the side effect is a write to the same database, DoTx commits the
// claim, the write and the recorded outcome in one transaction, so that a
// crash between the side effect and the finish can neither lose the work
// nor run it twice:
//
//	tx, err := store.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE
//	if err != nil {
//		return err
//	}
//	defer tx.Rollback()
//	res, err := store.DoTx(ctx, guard, tx, key, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
//		_, err := tx.ExecContext(ctx, `INSERT INTO refunds (order_id, amount) VALUES (?, ?)`, order, amount)
//		...
//	})
//	if err != nil {
//		return err
//	}
//	return tx.Commit()
//
// When the work waits on the network (a payment provider, another
// service), never hold a transaction across it: DoPhased commits the claim
// first, runs the external part outside any transaction, then makes the
// local writes and records the outcome in one short transaction:
//
//	res, err := store.DoPhased(ctx, guard, key, func(ctx context.Context) error {
//		ref, err = gateway.Refund(ctx, order, amount, idemkit.CallFromContext(ctx).IdempotencyKey())
//		return err
//	}, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
//		_, err := tx.ExecContext(ctx, `INSERT INTO refunds (order_id, amount, ref) VALUES (?, ?, ?)`, order, amount, ref)
//		...
//	})
//
// # Schema and time
//
// The schema is embedded (migrations/NNN_name.up.sql and .down.sql) and
// applied by Open, Migrate or MigrateTx; the table idemkit_migrations
// records the applied versions. Claim records live in idemkit_claims, one
// row per key; bodies larger than the Guard's inline maximum live apart in
// idemkit_responses and are read only when a duplicate needs them. Bodies
// are BLOBs, replayed byte for byte. Times are integer Unix nanoseconds, so
// leases and windows compare exactly. Every outcome is kept with the
// Guard's checksum of it (migration 004), so that a record changed behind
// the store's back is refused (idemkit.ErrRecordDamaged), never replayed
// wrong nor run again; rows from before 004 replay unchecked.
//
// # Concurrency and durability
//
// The claim is one INSERT … ON CONFLICT DO UPDATE … RETURNING statement,
// atomic under SQLite's single write lock; a duplicate's claim, which
// changes nothing, writes nothing either. Every claim is a write, and
// SQLite runs one writer at a time, so Open keeps one connection for
// writes by default, and the store's writes (and its DoInTx and
// BeginLocal transactions) queue for it in the process, bounded by their
// ctx, in order of arrival with the ends of work in flight (finishes,
// heartbeats, local transactions) ahead of new claims, and never meet
// SQLITE_BUSY. (database/sql alone would hand the connection to a random
// waiter, so that under a storm of claims a finish could wait without
// bound.) Other processes sharing the file wait for the lock for up to
// Config.BusyTimeout; an error matching ErrBusy says when that ran out.
// Transactions begun on DB() take the write lock at BEGIN (BEGIN
// IMMEDIATE).
//
// Reads never wait for the writer: Lookup, List and Response (a replay's
// body stored apart) run on a pool of read-only connections to the same
// file (PRAGMA query_only, Config.ReadConns), which under WAL read the last
// committed state while a transaction holds the write lock. ReadDB gives
// the tool's own reads the same pool.
//
// Commits are synced (PRAGMA synchronous=FULL) unless Config.Synchronous
// says otherwise: neither a crash of the process nor one of the machine
// loses a committed claim or outcome. With SynchronousNormal a crash of the
// process still loses nothing, and commits are cheaper, but a power loss
// may roll back the last ones.
//
// A ":memory:" database is one connection's, so Open(":memory:") keeps that
// single connection for the store's lifetime: useful for tests, durable for
// nothing.
package sqlitestore
