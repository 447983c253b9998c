// Package refunds is the demo's refund desk: an MCP server with one
// non-idempotent write tool (issue_refund, which inserts a refund row into
// an SQLite orders database through a fake payment gateway) and two
// read-only tools (get_refund_status, lookup_order).
//
// With an idemkit.Guard, instrument/mcpgo (or instrument/gosdk: Config.SDK
// picks the SDK, with the same tools, authentication and store) protects
// issue_refund: duplicates are replayed (or answered "in progress"), keys
// are scoped by the subject of the caller's bearer token (or by the
// validated MCP session of a caller without one), arguments are validated
// before the key (amount_cents: "100" or 12.5 is rejected, nothing runs),
// and idemkit's per-call key is forwarded to the gateway, which
// deduplicates on it too. Without a Guard the same tools are traced with
// the plain OpenTelemetry MCP conventions (package genaitrace), as a
// server was before idemkit, and every duplicate refunds again.
package refunds
