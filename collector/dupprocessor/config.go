package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// Defaults of Config. Each is documented in README.md; change both together.
const (
	// DefaultWindow is the event-time window in which two calls with the same
	// key are candidates for a duplicate: the idempotency key's expiry in the
	// seed article, which catches every retry path.
	DefaultWindow = 10 * time.Minute
	// DefaultDecisionWait is how long (processing time) a tool span is held
	// before its decision, so that out-of-order originals and chat spans that
	// are exported seconds later can still be taken into account. OTel SDKs
	// export batches every 5s by default.
	DefaultDecisionWait = 5 * time.Second
	// DefaultOriginalWait is how long a span whose own outcome proves that it
	// repeats an earlier call (replayed, in_progress, takeover or attempt > 1)
	// waits for that earlier call's span: a long first call is exported when
	// it ends, after its own retry.
	DefaultOriginalWait = time.Minute
	// DefaultMaxGroups caps the duplicate groups tracked at once; it also caps
	// the evidence contexts (traces, conversations, sessions) tracked at once.
	DefaultMaxGroups = 100_000
	// DefaultMaxHeldSpans caps the tool spans held for a decision at once;
	// past it the oldest held spans are decided early and released.
	DefaultMaxHeldSpans = 100_000
	// DefaultHarnessThreshold is the gap under which a same-session repeat
	// with no inference in between is a harness retry; at or above it, a
	// model re-issue.
	DefaultHarnessThreshold = 2 * time.Second
	// DefaultDeliberateRepeatGap is the gap from the previous call at or
	// above which a repeat with unrelated tool calls in between is a
	// deliberate repeat, not a duplicate.
	DefaultDeliberateRepeatGap = 2 * time.Minute
	// DefaultMaxArgumentsBytes is the largest gen_ai.tool.call.arguments value
	// that is parsed and canonicalised (package spancontract/canonjson, as
	// idemkit's keys are) before hashing; a larger one is hashed as it is.
	DefaultMaxArgumentsBytes = 64 << 10
)

// DefaultUnreliableSessionIDs returns the mcp.session.id values that do not
// tell one session from another: mcp-go reports "stdio" for every stdio
// session. An empty session ID is always unreliable.
func DefaultUnreliableSessionIDs() []string { return []string{"stdio"} }

// Config is the configuration of the dup processor. The zero value of each
// field means "use the default" only through createDefaultConfig; Validate
// rejects zero durations.
type Config struct {
	// Window is the event-time (span start timestamps) window from a group's
	// first call within which later calls with the same key are duplicate
	// candidates. Defaults to DefaultWindow.
	Window time.Duration `mapstructure:"window"`
	// DecisionWait is how long, in processing time, a tool span is held before
	// it is classified and released. Defaults to DefaultDecisionWait.
	DecisionWait time.Duration `mapstructure:"decision_wait"`
	// OriginalWait is how long, in processing time from its arrival, a span
	// whose outcome proves a predecessor waits for that predecessor's span.
	// Defaults to DefaultOriginalWait.
	OriginalWait time.Duration `mapstructure:"original_wait"`
	// MaxGroups is the hard cap on tracked groups (and evidence contexts); the
	// oldest not seen again is evicted past it. Defaults to DefaultMaxGroups.
	MaxGroups int `mapstructure:"max_groups"`
	// MaxHeldSpans caps the tool spans held at once. Defaults to DefaultMaxHeldSpans.
	MaxHeldSpans int `mapstructure:"max_held_spans"`
	// HarnessThreshold separates harness retries from model re-issues.
	// Defaults to DefaultHarnessThreshold.
	HarnessThreshold time.Duration `mapstructure:"harness_threshold"`
	// DeliberateRepeatGap is the gap at or above which a repeat with
	// unrelated tool calls in between is deliberate. Defaults to
	// DefaultDeliberateRepeatGap.
	DeliberateRepeatGap time.Duration `mapstructure:"deliberate_repeat_gap"`
	// UnreliableSessionIDs lists mcp.session.id values shared by unrelated
	// sessions. Defaults to DefaultUnreliableSessionIDs().
	UnreliableSessionIDs []string `mapstructure:"unreliable_session_ids"`
	// MaxArgumentsBytes bounds the arguments canonicalised for the computed
	// key. Defaults to DefaultMaxArgumentsBytes.
	MaxArgumentsBytes int `mapstructure:"max_arguments_bytes"`
	// ReadOnlyTools lists the tools whose calls have no side effect, for
	// the spans of other instrumentations (spans without idemkit.outcome):
	// a repeated read is never a duplicate. Each entry is a tool name or a
	// glob pattern (`*`, `?`, `[a-z]`, as path.Match), matched against
	// gen_ai.tool.name: `get_*`, `search`. idemkit's own spans say it
	// themselves (idemkit.outcome=bypassed). Defaults to none.
	ReadOnlyTools []string `mapstructure:"read_only_tools"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ confmap.Validator = (*Config)(nil)

// Validate checks the configuration; each error names the YAML key at fault.
func (c *Config) Validate() error {
	var errs []error
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window: must be positive, got %s", c.Window))
	}
	if c.DecisionWait <= 0 {
		errs = append(errs, fmt.Errorf("decision_wait: must be positive, got %s", c.DecisionWait))
	} else if c.Window > 0 && c.DecisionWait >= c.Window {
		errs = append(errs, fmt.Errorf("decision_wait: must be shorter than window (%s), got %s", c.Window, c.DecisionWait))
	}
	if c.OriginalWait < c.DecisionWait {
		errs = append(errs, fmt.Errorf("original_wait: must be at least decision_wait (%s), got %s", c.DecisionWait, c.OriginalWait))
	} else if c.Window > 0 && c.OriginalWait >= c.Window {
		errs = append(errs, fmt.Errorf("original_wait: must be shorter than window (%s), got %s", c.Window, c.OriginalWait))
	}
	if c.MaxGroups <= 0 {
		errs = append(errs, fmt.Errorf("max_groups: must be positive, got %d", c.MaxGroups))
	}
	if c.MaxHeldSpans <= 0 {
		errs = append(errs, fmt.Errorf("max_held_spans: must be positive, got %d", c.MaxHeldSpans))
	}
	if c.HarnessThreshold <= 0 {
		errs = append(errs, fmt.Errorf("harness_threshold: must be positive, got %s", c.HarnessThreshold))
	}
	if c.DeliberateRepeatGap <= c.HarnessThreshold {
		errs = append(errs, fmt.Errorf("deliberate_repeat_gap: must be longer than harness_threshold (%s), got %s", c.HarnessThreshold, c.DeliberateRepeatGap))
	}
	if c.MaxArgumentsBytes < 0 {
		errs = append(errs, fmt.Errorf("max_arguments_bytes: must not be negative, got %d", c.MaxArgumentsBytes))
	}
	for i, t := range c.ReadOnlyTools {
		if t == "" {
			errs = append(errs, fmt.Errorf("read_only_tools[%d]: must not be empty", i))
		} else if _, err := path.Match(t, ""); err != nil {
			errs = append(errs, fmt.Errorf("read_only_tools[%d]: %q is not a valid glob pattern (path.Match syntax: *, ?, [a-z], \\ to escape)", i, t))
		}
	}
	for i, s := range c.UnreliableSessionIDs {
		if s == "" {
			errs = append(errs, fmt.Errorf("unreliable_session_ids[%d]: must not be empty (an empty session ID is always unreliable)", i))
		}
	}
	return errors.Join(errs...)
}

func createDefaultConfig() *Config {
	return &Config{
		Window:               DefaultWindow,
		DecisionWait:         DefaultDecisionWait,
		OriginalWait:         DefaultOriginalWait,
		MaxGroups:            DefaultMaxGroups,
		MaxHeldSpans:         DefaultMaxHeldSpans,
		HarnessThreshold:     DefaultHarnessThreshold,
		DeliberateRepeatGap:  DefaultDeliberateRepeatGap,
		UnreliableSessionIDs: DefaultUnreliableSessionIDs(),
		MaxArgumentsBytes:    DefaultMaxArgumentsBytes,
	}
}

// toolMatcher matches tool names against read_only_tools: names in a set,
// patterns in order.
type toolMatcher struct {
	names    map[string]struct{}
	patterns []string
}

func newToolMatcher(entries []string) toolMatcher {
	var m toolMatcher
	for _, e := range entries {
		if strings.ContainsAny(e, `*?[\`) {
			m.patterns = append(m.patterns, e)
			continue
		}
		if m.names == nil {
			m.names = map[string]struct{}{}
		}
		m.names[e] = struct{}{}
	}
	return m
}

// empty reports whether nothing can match.
func (m *toolMatcher) empty() bool { return len(m.names) == 0 && len(m.patterns) == 0 }

// match reports whether tool is listed.
func (m *toolMatcher) match(tool string) bool {
	if _, ok := m.names[tool]; ok {
		return true
	}
	for _, p := range m.patterns {
		if ok, _ := path.Match(p, tool); ok {
			return true
		}
	}
	return false
}
