// Package gatewayconfig reads the configuration file of `idemkit gateway`
// (--config FILE): the per-tool settings idemkit's Go middleware takes as
// idemkit.ToolConfig and instrument options (window, lease, wait, failure
// policy, status tool, excluded fields, protect or bypass), defaults for
// every tool, and the gateway's own call status tool. The file is YAML:
//
//	defaults:
//	  window: 10m
//	  lease: 2m
//	  wait: 0s
//	  failure_policy: release     # release | store
//	call_status_tool:
//	  enabled: true
//	  name: idemkit_call_status
//	tools:
//	  issue_refund:
//	    window: 30m
//	    failure_policy: store
//	    exclude: [nonce, /order/requested_at, /items/*/nonce]
//	    round: {/sent_at: 1m}
//	  search:
//	    protect: false
//
// Parse checks the whole file before anything starts: an unknown field, a
// value of the wrong type or out of range, or a setting that contradicts
// another is an error that names the file, the line and the setting
// ("gateway.yaml:7: tools.issue_refund.window: ..."). A tool may also
// require an explicit key (require_key), mix a version into its keys
// (version) and bound its failed attempts (max_attempts). exclude takes
// top-level names and JSON Pointers (RFC 6901, "*" for every array
// element); round truncates RFC 3339 timestamp fields to a granularity
// that divides 24h, as instrument.WithExclude and WithRound document. A
// human gate (confirm) is not in this version: the gateway cannot ask its
// client a question of its own.
//
//	tools:
//	  transfer:
//	    require_key: true
//	    version: "2"
//	    max_attempts: 3
package gatewayconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/argpolicy"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// DefaultCallStatusTool is the name of the gateway's call status tool when
// the file does not name it.
const DefaultCallStatusTool = mcpcall.DefaultCallStatusTool

// MaxFileBytes bounds the size of a configuration file.
const MaxFileBytes = 1 << 20

// File is a parsed configuration file. Zero fields were not set.
type File struct {
	// Path names the file in errors.
	Path string
	// Defaults apply to every protected tool; a tool's own settings win.
	Defaults Policy
	// CallStatusTool is the call_status_tool section, or nil when the file
	// has none.
	CallStatusTool *CallStatusTool
	// Tools are the per-tool settings, by tool name.
	Tools map[string]*Tool

	lines map[string]int // setting path -> line
}

// Policy is the part of a tool's settings that defaults may set too. Zero
// fields inherit.
type Policy struct {
	// Window is how long a completed call's result answers duplicates.
	Window time.Duration
	// Lease is how long a running call holds its key without progress.
	Lease time.Duration
	// Wait is how long a duplicate of a running call waits for its result
	// before it is told "in progress"; WaitSet tells "0s" from unset.
	Wait    time.Duration
	WaitSet bool
	// FailurePolicy decides whether isError results are stored (store) or
	// released for a retry to run again (release).
	FailurePolicy idemkit.FailurePolicy
}

// Tool is one tool's settings.
type Tool struct {
	Name string
	Policy
	// Protect, when set, protects the tool (true) or never protects it
	// (false) whatever its annotations say.
	Protect *bool
	// StatusTool is the tool the in-progress answer names, or "".
	StatusTool string
	// Exclude lists argument fields left out of the key: top-level names
	// or JSON Pointers (as instrument.WithExclude).
	Exclude []string
	// Round maps timestamp fields (JSON Pointers or top-level names) to
	// the granularity they are truncated to in the key (as
	// instrument.WithRound).
	Round map[string]time.Duration
	// RequireKey refuses a call without an explicit key (as
	// instrument.WithRequireKey).
	RequireKey bool
	// Version is mixed into the tool's keys (as instrument.WithToolVersion).
	Version string
	// MaxAttempts bounds one call's failed attempts (as
	// idemkit.ToolConfig.MaxAttempts); 0: no limit.
	MaxAttempts int
}

// CallStatusTool is the call_status_tool section.
type CallStatusTool struct {
	// Enabled is false when the section switches the tool off; EnabledSet
	// tells whether it said.
	Enabled, EnabledSet bool
	// Name is the tool's name, or "" for DefaultCallStatusTool.
	Name string
}

// Load reads and parses the file at path.
func Load(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("--config %s: the file is over %d bytes; a gateway configuration is a few lines per tool", path, MaxFileBytes)
	}
	return Parse(path, data)
}

// Parse parses a configuration file's contents; name names it in errors.
func Parse(name string, data []byte) (*File, error) {
	f := &File{Path: name, Tools: map[string]*Tool{}, lines: map[string]int{}}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return f, nil // an empty file: nothing set
	case err != nil:
		return nil, fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: a second YAML document; the configuration is one document", name, more.Line)
	}
	p := &parser{f: f}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = deref(root.Content[0])
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return f, nil
	}
	p.top(root)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

// parser walks the YAML tree and collects every error, each naming its
// line and setting.
type parser struct {
	f    *File
	errs []error
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %s", p.f.Path, n.Line, path, fmt.Sprintf(format, args...)))
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// fields calls fn for each key of mapping n (named path), after checking
// that n is a mapping whose keys are distinct strings among known.
func (p *parser) fields(n *yaml.Node, path string, known []string, fn func(key string, k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping of %s", strings.Join(known, ", "))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		key := k.Value
		where := join(path, key)
		if k.Kind != yaml.ScalarNode {
			p.fail(k, path, "a key must be a name")
			continue
		}
		if line, dup := seen[key]; dup {
			p.fail(k, where, "set twice (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		if known != nil && !slices.Contains(known, key) {
			p.fail(k, where, "unknown setting; %s takes %s", orTop(path), strings.Join(known, ", "))
			continue
		}
		fn(key, k, v)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

var (
	topFields    = []string{"defaults", "call_status_tool", "tools"}
	policyFields = []string{"window", "lease", "wait", "failure_policy"}
	toolFields   = append(slices.Clone(policyFields), "protect", "status_tool", "exclude", "round", "require_key", "version", "max_attempts")
	statusFields = []string{"enabled", "name"}
)

func (p *parser) top(n *yaml.Node) {
	p.fields(n, "", topFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "defaults":
			p.fields(v, "defaults", policyFields, func(key string, k, v *yaml.Node) {
				p.policy(&p.f.Defaults, "defaults", key, v)
			})
		case "call_status_tool":
			p.callStatusTool(v)
		case "tools":
			p.tools(v)
		}
	})
}

func (p *parser) policy(pol *Policy, path, key string, v *yaml.Node) {
	where := join(path, key)
	p.f.lines[where] = v.Line
	switch key {
	case "window":
		pol.Window = p.duration(v, where, false)
	case "lease":
		pol.Lease = p.duration(v, where, false)
	case "wait":
		pol.Wait, pol.WaitSet = p.duration(v, where, true), true
	case "failure_policy":
		switch s := p.str(v, where); s {
		case "release":
			pol.FailurePolicy = idemkit.ReleaseToolErrors
		case "store":
			pol.FailurePolicy = idemkit.StoreToolErrors
		case "":
		default:
			p.fail(v, where, "%q is not a failure policy: release (an isError result is not kept, and a retry runs the tool again) or store (an isError result is kept and replayed, like a success)", s)
		}
	}
}

// duration reads a Go duration ("90s", "15m", "1h30m"): positive, or zero
// too when zeroOK, and at most idemkit.MaxDuration.
func (p *parser) duration(v *yaml.Node, where string, zeroOK bool) time.Duration {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		p.fail(v, where, "must be a duration such as 90s, 15m or 1h30m")
		return 0
	}
	d, err := time.ParseDuration(v.Value)
	switch {
	case err != nil && v.Tag == "!!int":
		p.fail(v, where, "%s has no unit: write %ss, %sm or %sh", v.Value, v.Value, v.Value, v.Value)
	case err != nil:
		p.fail(v, where, "%q is not a duration: write it as 90s, 15m or 1h30m", v.Value)
	case d < 0 || (d == 0 && !zeroOK):
		p.fail(v, where, "must be positive, got %s", v.Value)
	case d > idemkit.MaxDuration:
		p.fail(v, where, "%s is over the limit of %s (100 years)", v.Value, idemkit.MaxDuration)
	default:
		return d
	}
	return 0
}

func (p *parser) str(v *yaml.Node, where string) string {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		p.fail(v, where, "must be a string")
		return ""
	}
	return v.Value
}

// positiveInt reads an integer of at least 1.
func (p *parser) positiveInt(v *yaml.Node, where string) int {
	var n int
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&n) != nil || n < 1 {
		p.fail(v, where, "must be a whole number of at least 1")
		return 0
	}
	return n
}

func (p *parser) boolean(v *yaml.Node, where string) bool {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || (v.Value != "true" && v.Value != "false") {
		p.fail(v, where, "must be true or false")
		return false
	}
	return v.Value == "true"
}

// maxToolNameLen is the longest tool name idemkit.NewKey accepts.
const maxToolNameLen = 256

// toolName checks a tool name as the key derivation does: not empty, at
// most 256 bytes, valid UTF-8 without control characters.
// (TestToolName_AsTheKeyDerivation holds it to idemkit.NewKey.)
func toolName(name string) error {
	switch {
	case name == "":
		return errors.New("a tool name must not be empty")
	case len(name) > maxToolNameLen:
		return fmt.Errorf("the tool name is %d bytes, over the %d-byte limit", len(name), maxToolNameLen)
	case !utf8.ValidString(name):
		return errors.New("the tool name is not valid UTF-8")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return errors.New("the tool name has a control character")
	}
	return nil
}

func (p *parser) callStatusTool(v *yaml.Node) {
	cs := &CallStatusTool{Enabled: true}
	p.f.CallStatusTool = cs
	p.f.lines["call_status_tool"] = v.Line
	p.fields(v, "call_status_tool", statusFields, func(key string, k, v *yaml.Node) {
		where := join("call_status_tool", key)
		p.f.lines[where] = v.Line
		switch key {
		case "enabled":
			cs.Enabled, cs.EnabledSet = p.boolean(v, where), true
		case "name":
			cs.Name = p.str(v, where)
			if err := toolName(cs.Name); err != nil {
				p.fail(v, where, "%v", err)
			}
		}
	})
	if cs.EnabledSet && !cs.Enabled && cs.Name != "" {
		p.fail(v, "call_status_tool", "names a tool but switches it off (enabled: false); drop one of the two")
	}
}

func (p *parser) tools(v *yaml.Node) {
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return
	}
	p.fields(v, "tools", nil, func(name string, k, v *yaml.Node) {
		where := join("tools", name)
		if err := toolName(name); err != nil {
			p.fail(k, "tools", "%v", err)
			return
		}
		t := &Tool{Name: name}
		p.f.Tools[name] = t
		p.f.lines[where] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return // a tool listed with no settings
		}
		p.fields(v, where, toolFields, func(key string, k, v *yaml.Node) {
			at := join(where, key)
			p.f.lines[at] = v.Line
			switch key {
			case "protect":
				b := p.boolean(v, at)
				t.Protect = &b
			case "status_tool":
				t.StatusTool = p.str(v, at)
				if err := toolName(t.StatusTool); err != nil {
					p.fail(v, at, "%v", err)
				} else if t.StatusTool == name {
					p.fail(v, at, "names the tool itself; a status tool is another tool that reports on a running call without running it again")
				}
			case "exclude":
				t.Exclude = p.exclude(v, at)
			case "round":
				t.Round = p.round(v, at)
			case "require_key":
				t.RequireKey = p.boolean(v, at)
			case "version":
				if t.Version = p.str(v, at); t.Version == "" && v.Tag == "!!str" {
					p.fail(v, at, "must not be empty (leave it out for no version)")
				}
			case "max_attempts":
				t.MaxAttempts = p.positiveInt(v, at)
			default:
				p.policy(&t.Policy, where, key, v)
			}
		})
		if len(t.Round) > 0 {
			p.keyPolicy(t, where)
		}
		if t.Protect != nil && !*t.Protect {
			for _, key := range toolFields {
				if key != "protect" && p.f.lines[join(where, key)] != 0 {
					p.fail(v, join(where, key), "has no effect: protect is false, so the gateway never claims or replays %s's calls; drop the setting or protect the tool", name)
				}
			}
		}
	})
}

func (p *parser) exclude(v *yaml.Node, where string) []string {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, where, "must be a list of argument fields, top-level names or JSON Pointers, such as [nonce, /order/requested_at, /items/*/nonce]")
		return nil
	}
	var out []string
	for _, item := range v.Content {
		item = deref(item)
		s := p.str(item, where)
		switch {
		case s == "" && item.Tag == "!!str":
			p.fail(item, where, "an argument name must not be empty")
		case strings.HasPrefix(s, "/") && pointerErr(s) != nil:
			p.fail(item, where, "%v", pointerErr(s))
		case slices.Contains(out, s):
			p.fail(item, where, "%q is listed twice", s)
		case s != "":
			out = append(out, s)
		}
	}
	return out
}

// pointerErr reports what is wrong with the JSON Pointer s, or nil.
func pointerErr(s string) error {
	_, err := argpolicy.ParsePointer(s)
	return err
}

// round reads a round mapping: field (a JSON Pointer or a top-level name)
// -> granularity.
func (p *parser) round(v *yaml.Node, where string) map[string]time.Duration {
	if v.Kind != yaml.MappingNode {
		p.fail(v, where, "must be a mapping of timestamp fields to granularities, such as {/requested_at: 1m}")
		return nil
	}
	out := map[string]time.Duration{}
	p.fields(v, where, nil, func(field string, k, v *yaml.Node) {
		at := join(where, field)
		p.f.lines[at] = k.Line
		switch {
		case field == "" || k.Tag != "!!str":
			p.fail(k, where, "a field must be a top-level argument name or a JSON Pointer such as /order/requested_at")
			return
		case strings.HasPrefix(field, "/") && pointerErr(field) != nil:
			p.fail(k, where, "%v", pointerErr(field))
			return
		}
		d := p.duration(v, at, false)
		if d == 0 {
			return
		}
		if err := argpolicy.CheckGranularity(d); err != nil {
			p.fail(v, at, "%v", err)
			return
		}
		out[field] = d
	})
	return out
}

// keyPolicy checks a tool's exclude and round together, as the middleware
// will (a field both excluded and rounded, two granularities for one
// field).
func (p *parser) keyPolicy(t *Tool, where string) {
	if _, err := argpolicy.Compile(t.Exclude, t.Round); err != nil {
		at := join(where, "round")
		p.errs = append(p.errs, fmt.Errorf("%s:%d: %s: %v", p.f.Path, p.f.lines[at], at, err))
	}
}

// CallStatusToolName returns the call status tool's name as the file's
// call_status_tool section decides it: "" when it switches the tool off,
// its name, DefaultCallStatusTool when it names none; def when the file
// has no such section.
func (f *File) CallStatusToolName(def string) string {
	cs := f.CallStatusTool
	switch {
	case cs == nil:
		return def
	case cs.EnabledSet && !cs.Enabled:
		return ""
	case cs.Name != "":
		return cs.Name
	}
	return DefaultCallStatusTool
}

// Line returns the line a setting ("tools.issue_refund.window") was set on,
// or 0 when the file does not set it.
func (f *File) Line(path string) int { return f.lines[path] }

// Sets reports whether the file sets a setting ("defaults.window",
// "tools.issue_refund.protect").
func (f *File) Sets(path string) bool { return f.lines[path] != 0 }

// ToolNames returns the configured tools' names, sorted.
func (f *File) ToolNames() []string {
	names := make([]string, 0, len(f.Tools))
	for n := range f.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// CheckLeases checks every protected tool's resolved lease against its
// resolved window (a completed call must outlive its claim), window and
// lease being the gateway-wide ones (the flags', or defaults').
func (f *File) CheckLeases(window, lease time.Duration) error {
	var errs []error
	for _, name := range f.ToolNames() {
		t := f.Tools[name]
		if t.Protect != nil && !*t.Protect {
			continue
		}
		w, l := orDuration(t.Window, window), orDuration(t.Lease, lease)
		if l > w {
			where := "tools." + name + ".lease"
			if !f.Sets(where) {
				where = "tools." + name + ".window"
			}
			errs = append(errs, fmt.Errorf("%s:%d: %s: %s's lease (%s) is longer than its window (%s): a completed call must outlive its claim; shorten the lease or lengthen the window",
				f.Path, f.Line(where), where, name, l, w))
		}
	}
	return errors.Join(errs...)
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// GuardTools returns the per-tool overrides of the Guard (idemkit.Config's
// Tools): window, lease, wait, failure policy and status tool. Tools that
// are never protected, or that set none of these, are left out.
func (f *File) GuardTools() map[string]idemkit.ToolConfig {
	var out map[string]idemkit.ToolConfig
	for name, t := range f.Tools {
		if t.Protect != nil && !*t.Protect {
			continue
		}
		tc := idemkit.ToolConfig{StatusTool: t.StatusTool, Window: t.Window, Lease: t.Lease, Wait: t.Wait, FailurePolicy: t.FailurePolicy, MaxAttempts: t.MaxAttempts}
		if t.WaitSet && t.Wait == 0 && f.Defaults.Wait > 0 {
			// "wait: 0s" on the tool turns off a default wait, which a zero
			// ToolConfig.Wait would inherit: a nanosecond's wait ends
			// before the first retry of the claim.
			tc.Wait = time.Nanosecond
		}
		if tc == (idemkit.ToolConfig{}) {
			continue
		}
		if out == nil {
			out = map[string]idemkit.ToolConfig{}
		}
		out[name] = tc
	}
	return out
}

// ApplyInstrumentation sets the file's protect and bypass overrides,
// excluded and rounded fields, required keys and tool versions in c (as
// instrument.WithProtect, WithBypass, WithExclude, WithRound,
// WithRequireKey and WithToolVersion do).
func (f *File) ApplyInstrumentation(c *mcpcall.Config) {
	for name, t := range f.Tools {
		if t.Protect != nil {
			if c.Protect == nil {
				c.Protect = map[string]bool{}
			}
			c.Protect[name] = *t.Protect
		}
		if len(t.Exclude) > 0 {
			if c.Exclude == nil {
				c.Exclude = map[string][]string{}
			}
			c.Exclude[name] = slices.Clone(t.Exclude)
		}
		if len(t.Round) > 0 {
			if c.Round == nil {
				c.Round = map[string]map[string]time.Duration{}
			}
			c.Round[name] = maps.Clone(t.Round)
		}
		if t.RequireKey {
			if c.RequireKey == nil {
				c.RequireKey = map[string]bool{}
			}
			c.RequireKey[name] = true
		}
		if t.Version != "" {
			if c.ToolVersions == nil {
				c.ToolVersions = map[string]string{}
			}
			c.ToolVersions[name] = t.Version
		}
	}
}
