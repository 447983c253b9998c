package instrument

import "github.com/idemkit-mcp/idemkit/internal/mcpcall"

// WithCallStatusTool makes the adapter serve a call status tool named name
// ("idemkit_call_status" when name is ""): a read-only tool, listed in
// tools/list, that takes {"tool", "arguments"} (or {"tool", "key"}, the
// call's idempotency_key) and answers the caller's own record of that
// call, as a duplicate of it would find it, without claiming or running
// anything: in progress (with the attempt, the last progress note and when
// to ask again), completed (the stored result, replayed with
// spancontract.ReplayMetaKey), released after a failure, or unknown, with
// a spancontract.CallStatusMetaKey marker. It is scoped like every call
// (WithSubject, else the session): a caller never reads another caller's
// record. The in-progress answer of a protected tool that has no status
// tool of its own (WithStatusTool, its _meta, the Guard's ToolConfig)
// names it. Without a Guard it is not served. Defaults to off.
func WithCallStatusTool(name string) Option {
	if name == "" {
		name = mcpcall.DefaultCallStatusTool
	}
	return optionFunc(func(c *mcpcall.Config) { c.CallStatusTool = name })
}
