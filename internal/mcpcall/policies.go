package mcpcall

import (
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/argpolicy"
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

// checkKeyPolicies validates every tool's key policy (Config.Exclude and
// Config.Round) with the rules idemkit.NewKey applies, once, when the
// Instrumenter is built: the options cannot return an error, so a tool
// whose policy is invalid is logged as an error here, with what to fix,
// and each of its protected calls is refused (policyText) instead of
// being keyed without the policy the operator believes in. It returns the
// invalid tools' errors, nil when there are none.
func checkKeyPolicies(cfg *Config) map[string]error {
	var bad map[string]error
	check := func(tool string) {
		if _, done := bad[tool]; done {
			return
		}
		if _, err := argpolicy.Cached(cfg.Exclude[tool], cfg.Round[tool]); err != nil {
			if bad == nil {
				bad = make(map[string]error)
			}
			bad[tool] = err
			cfg.Logger.Error("idemkit: the key policy of a tool is invalid; its protected calls are refused until it is fixed",
				"tool", tool, "err", err, "fix", "correct instrument.WithExclude or instrument.WithRound for the tool")
		}
	}
	for tool := range cfg.Exclude {
		check(tool)
	}
	for tool := range cfg.Round {
		check(tool)
	}
	return bad
}

// policyError is the error of a call of a tool whose key policy is
// invalid (see checkKeyPolicies).
type policyError struct{ err error }

func (e *policyError) Error() string { return e.err.Error() }

// policyText is the refusal of a call of a tool whose key policy is
// invalid: the server's configuration, not the request, is wrong.
func policyText(tool string) string {
	return "The " + tool + " call was not run: the server's idempotency configuration for this tool is invalid, so it cannot make a retry of this call safe. " +
		"Nothing was done. Retrying will not help: tell the user that the " + tool + " tool is misconfigured on the server."
}
