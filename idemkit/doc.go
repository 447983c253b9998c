// Package idemkit makes write tools safe to call twice.
//
// Agents retry tool calls: the model re-issues a call it thinks failed, the
// harness retries on an exception, the MCP client resumes a broken stream by
// re-sending, and HTTP infrastructure retries a dropped connection. A write
// tool wrapped by a Guard runs its side effect once however many times it is
// called, and every duplicate gets the first call's response back byte for
// byte.
//
// The flow of one call through Guard.Do:
//
//  1. A Key is derived from the caller's subject, the tool name and the
//     SHA-256 of the canonical arguments (RFC 8785, with numbers kept at
//     their exact decimal value), or the caller's explicit idempotency
//     key; see NewKey.
//  2. The key is claimed in the store with one atomic operation. Exactly one
//     caller wins the claim and runs the work; the claim has a lease.
//  3. The outcome is stored. Duplicates arriving later get the stored
//     response (Outcome "replayed"); duplicates arriving while the first call
//     runs get an *InProgressError whose text tells a model not to retry and
//     which status tool to call, or wait for the first call when Wait is set.
//  4. A failed attempt (a Go error, and by default a tool-level error
//     response) releases the claim: the next duplicate takes it over and runs
//     the work again (Outcome "takeover"). So does a duplicate that finds an
//     in-progress claim whose lease has run out, because its worker crashed.
//     A stale worker's late finish is fenced off and cannot overwrite the new
//     owner's outcome.
//  5. The finish is retried on transient store errors (ErrTransient) with
//     backoff until Config.FinishTimeout, so that a database restart at the
//     end of the work does not leave the key in progress. One that still
//     fails is logged and returned as a *FinishError, never dropped.
//  6. A durable store keeps a checksum with every outcome, which every
//     replay verifies: a record damaged in storage (an overwritten body, an
//     unknown storage kind, a body stored apart that is gone) is refused
//     with a *RecordDamagedError (the call ran, its answer cannot be read),
//     logged, and neither replayed nor run again.
//
// The hashes idemkit exports (idemkit.args.hash, idemkit.key.hash,
// idemkit.subject.hash and the hashed mcp.session.id, on spans, in logs and
// in error texts) are plain SHA-256 without a key, which anyone can
// recompute from guessed inputs: arguments of low entropy (an order ID and
// an amount) and subjects such as e-mail addresses are recovered with a
// dictionary in seconds. With a deployment's hash key (Config.HashKey,
// instrument.WithHashKey, the gateway's --hash-key-file) every one is an
// HMAC-SHA-256 under it, which nobody without the key can compute; give
// every replica the same key, so that the Collector still groups their
// duplicates. The key never changes what a Store keeps (Key.ID and the
// fingerprint are derived without it).
//
// A record can be read without claiming it: Guard.Lookup reports one call
// by its Key (in progress with its last heartbeat note, completed with the
// body a duplicate would get, or released after a failure with its error
// text), and a store's List (idemstore.Store) pages through records by
// state, tool and key prefix for operators. Guard.Cancel ends an attempt in progress from anywhere
// (fencing its worker out, which learns at its next heartbeat), and
// Guard.ReleaseAbandoned settles one whose worker died.
//
// Durable background runs (the jobs and MCP tasks of package instrument)
// are claims too: NewRunKey gives each its record in its owner's
// namespace, so that its status, progress note and outcome live in the
// store, for every replica and after a restart.
//
// Stores: MemoryStore (this package; its zero value is ready to use),
// idemkit/sqlitestore (embedded, durable) and idemkit/pgstore (PostgreSQL);
// both SQL stores have DoTx and DoInTx, which commit the claim, the tool's
// own writes and the outcome in one transaction, and DoPhased, for work that
// waits on the network: the claim commits first, the external part runs
// outside any transaction, then the tool's own writes and the outcome commit
// together in a short one (Guard.DoPhased; a transaction
// is never held across a network wait). Every store passes the conformance
// suite in idemkit/storetest. The SQL stores keep expired
// records until Sweep deletes them: whoever builds a Guard on one runs
// Guard.StartSweeper (or the idemkit sweep command) beside it. MemoryStore
// deletes its expired records itself, and is bounded: at MaxRecords
// records (100,000 by default) or MaxBytes (256 MiB) with none expired, it
// refuses new keys with an *idemstore.StoreFullError and evicts nothing.
//
// This package depends on the standard library and the stdlib-only span
// contract; it never imports a database driver, an MCP SDK
// or OpenTelemetry.
package idemkit
