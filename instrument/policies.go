package instrument

import "github.com/idemkit-mcp/idemkit/internal/mcpcall"

// WithRequireKey makes tools refuse a protected call that carries no
// explicit idempotency key (the idempotency_key argument, or KeyMetaKey in
// params._meta), with RefusalMissingKey and a text that tells the model to
// send a new unique key per request and the same one on a retry. Use it
// for the tools a person may fire twice on purpose within the window (two
// identical transfers a minute apart), for which an argument hash cannot
// tell a retry from a new request. Defaults to none: keys are derived from
// the arguments when the call has none.
func WithRequireKey(tools ...string) Option {
	return optionFunc(func(c *mcpcall.Config) {
		if c.RequireKey == nil {
			c.RequireKey = make(map[string]bool, len(tools))
		}
		for _, t := range tools {
			c.RequireKey[t] = true
		}
	})
}

// WithToolVersion mixes version into the keys of tool's calls, so that
// after the tool changes (bump the version with it) a call is never
// answered with a result the old version stored within the window.
// Derived and explicit keys both change with it. Defaults to no version.
func WithToolVersion(tool, version string) Option {
	return optionFunc(func(c *mcpcall.Config) {
		if c.ToolVersions == nil {
			c.ToolVersions = make(map[string]string)
		}
		c.ToolVersions[tool] = version
	})
}
