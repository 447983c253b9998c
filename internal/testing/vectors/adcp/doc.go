// Package adcp is an independent conformance suite for idemkit: the
// idempotency vectors that the Ad Context Protocol (AdCP) publishes for the
// tool calls of AI buyer agents, translated into Go and run against the
// real idemkit.
//
// AdCP is a protocol whose tasks (create_media_buy, get_media_buys, …) are
// MCP tool calls made by AI agents. Its compliance kit publishes a
// storyboard, universal/idempotency.yaml, that every seller agent must
// pass: a missing key is refused, a replay with the same key returns the
// cached response without new side effects, a reused key with a different
// payload is refused with IDEMPOTENCY_CONFLICT without leaking the cached
// state, and a fresh key is a new request. Its reference SDK adds the
// behaviours the storyboard relies on (RFC 8785 canonical payloads, an
// exclusion list, per-principal scope, an in-flight answer, failed calls
// not cached, a key pattern, expiry).
//
// The tests drive each vector through the idemkit.Guard on every store
// (memory, SQLite, PostgreSQL) and through the MCP adapters with real
// mcp-go and go-sdk servers and clients over Streamable HTTP. The README
// beside this file names the source (package, version, path, checksum,
// licence), maps every storyboard step to the test that runs it, and lists
// with a reason each vector whose intent does not apply to idemkit.
//
// Nothing here ships: the package holds only tests.
package adcp
