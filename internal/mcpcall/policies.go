package mcpcall

import (
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Per-tool policies beyond protection (Config.RequireKey, ToolVersions;
// idemkit.ToolConfig.MaxAttempts is the Guard's).

// Refusal reasons of the policies.
const (
	// RefusalMissingKey: the tool requires an explicit idempotency key and
	// the call has none; nothing was done.
	RefusalMissingKey = spancontract.RefusalMissingKey
	// RefusalAttemptsExhausted: the call's attempts failed as many times
	// as the tool's MaxAttempts allows; nothing was done.
	RefusalAttemptsExhausted = spancontract.RefusalAttemptsExhausted
)

// missingKey returns the refusal text of a call of a tool that requires an
// explicit key and whose key is derived, or "".
func (in *Instrumenter) missingKey(tool string, key idemkit.Key) string {
	if !in.cfg.RequireKey[tool] || key.Source() == spancontract.KeySourceExplicit {
		return ""
	}
	return fmt.Sprintf("The %s tool needs an explicit idempotency key, because a person may ask for the same %s twice on purpose. "+
		"Nothing was done. Call it again with an %s argument: a new unique value (a UUID) for each new request the user makes, "+
		"and the same value when you retry this one.", tool, tool, spancontract.KeyArgument)
}

// versionedScope returns the key scope of a call of tool: with the tool's
// version (Config.ToolVersions) appended, so that a call made after the
// tool changed never replays an answer the old version stored.
func (in *Instrumenter) versionedScope(scope, tool string) string {
	v, ok := in.cfg.ToolVersions[tool]
	if !ok || v == "" {
		return scope
	}
	return scope + "\x00tool-version\x00" + v
}
