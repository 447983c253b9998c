// Package refunds is the demo's refund desk: an MCP server with one
// non-idempotent write tool (issue_refund, which pays a refund through a
// payment gateway's HTTP API and inserts a refund row into the orders
// database) and two read-only tools (get_refund_status, lookup_order). The
// fake gateway (Gateway) is a real net/http server, which NewServer serves
// on a loopback port unless Config.GatewayURL names another; it
// deduplicates by the Idempotency-Key header for 24 hours, as Stripe does.
//
// With an idemkit.Guard, instrument/mcpgo (or instrument/gosdk: Config.SDK
// picks the SDK, with the same tools, authentication and store) protects
// issue_refund: duplicates are replayed (or answered "in progress"), keys
// are scoped by the subject of the caller's bearer token (or by the
// validated MCP session of a caller without one), arguments are validated
// before the key (amount_cents: "100" or 12.5 is rejected, nothing runs),
// and the call's downstream key (the record's: the same on every attempt,
// a new one for a deliberate repeat after the window) goes to the gateway
// in Idempotency-Key through downstream.Transport (GatewayClient), so the
// gateway deduplicates the payment of a call taken over after a crash. issue_refund runs in atomic phases in every mode
// (mcpgo.AddPhasedTool, gosdk.AddPhasedTool on the SQL stores): the claim
// commits, the payment runs outside any transaction, then the refund row
// (and, on the SQL stores, the recorded outcome) commits in one short
// transaction; the server without idemkit does the same two phases. Reads
// run on read-only connections and never wait for a writer. Without a Guard the same tools are traced with
// the plain OpenTelemetry MCP conventions (package genaitrace), as a
// server was before idemkit, and every duplicate refunds again.
package refunds
