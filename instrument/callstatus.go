package instrument

import "github.com/idemkit-mcp/idemkit/internal/mcpcall"

// DefaultCallStatusTool is the name of the call status tool that
// WithCallStatusTool("") serves.
const DefaultCallStatusTool = mcpcall.DefaultCallStatusTool

// CallStatusMetaKey is the result _meta entry of a call status answer:
// {"state": "…", "tool": "…"}, where state is in_progress (with "attempt",
// "started", "note" when the call reported progress, "retry_after_ms":
// when to ask again, and "lease_expires_in_ms"), abandoned, released
// (with "attempt"), unknown, mismatch or not_recorded; an isError answer's
// state is rejected, unscoped or store_unavailable. A completed call is
// answered with its stored result and ReplayMetaKey instead, as a
// duplicate of it would be.
const CallStatusMetaKey = mcpcall.CallStatusMetaKey

// WithCallStatusTool makes the adapter serve a call status tool named name
// (DefaultCallStatusTool when name is ""): a read-only tool, listed in
// tools/list, that takes {"tool", "arguments"} (or {"tool", "key"}, the
// call's idempotency_key) and answers the caller's own record of that call, as
// a duplicate of it would find it, without claiming or running anything:
// in progress (with the attempt, the last progress note and when to ask
// again), completed (the stored result, replayed with ReplayMetaKey),
// released after a failure, or unknown. It is scoped like every call
// (WithSubject, else the session): a caller never reads another caller's
// record. The in-progress answer of a protected tool that has no status
// tool of its own (WithStatusTool, its _meta, the Guard's ToolConfig)
// names it. Without a Guard it is not served. Defaults to off.
func WithCallStatusTool(name string) Option {
	if name == "" {
		name = DefaultCallStatusTool
	}
	return optionFunc(func(c *mcpcall.Config) { c.CallStatusTool = name })
}
