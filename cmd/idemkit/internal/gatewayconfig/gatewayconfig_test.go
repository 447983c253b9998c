package gatewayconfig

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// TestLoad_TheExampleFile loads the example the README documents and
// checks what each of its settings becomes.
func TestLoad_TheExampleFile(t *testing.T) {
	f, err := Load("../../testdata/gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Defaults, (Policy{Window: 10 * time.Minute, Lease: 2 * time.Minute, WaitSet: true, FailurePolicy: idemkit.ReleaseToolErrors}); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	if cs := f.CallStatusTool; cs == nil || !cs.Enabled || cs.Name != "idemkit_call_status" {
		t.Errorf("call_status_tool %+v", cs)
	}
	if got, want := f.ToolNames(), []string{"charge_card", "export_report", "issue_refund", "lookup_order", "poll_export", "set_status"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tools %v, want %v", got, want)
	}
	wantGuard := map[string]idemkit.ToolConfig{
		"issue_refund":  {Window: 30 * time.Minute},
		"charge_card":   {FailurePolicy: idemkit.StoreToolErrors},
		"export_report": {Lease: 30 * time.Second, Wait: 5 * time.Second, StatusTool: "idemkit_call_status", MaxAttempts: 3},
	}
	if got := f.GuardTools(); !reflect.DeepEqual(got, wantGuard) {
		t.Errorf("GuardTools %v, want %v", got, wantGuard)
	}
	var c mcpcall.Config
	f.ApplyInstrumentation(&c)
	if want := map[string]bool{"set_status": true, "lookup_order": false}; !reflect.DeepEqual(c.Protect, want) {
		t.Errorf("Protect %v, want %v", c.Protect, want)
	}
	if want := map[string][]string{"issue_refund": {"requested_at", "/items/*/nonce"}}; !reflect.DeepEqual(c.Exclude, want) {
		t.Errorf("Exclude %v, want %v", c.Exclude, want)
	}
	if want := map[string]map[string]time.Duration{"issue_refund": {"/client/sent_at": time.Minute}}; !reflect.DeepEqual(c.Round, want) {
		t.Errorf("Round %v, want %v", c.Round, want)
	}
	if !reflect.DeepEqual(c.RequireKey, map[string]bool{"poll_export": true}) || !reflect.DeepEqual(c.ToolVersions, map[string]string{"issue_refund": "1"}) {
		t.Errorf("RequireKey %v, ToolVersions %v", c.RequireKey, c.ToolVersions)
	}
	if f.Line("tools.issue_refund.window") != 24 {
		t.Errorf("tools.issue_refund.window is on line %d, want 24", f.Line("tools.issue_refund.window"))
	}
	if err := f.CheckLeases(10*time.Minute, 2*time.Minute); err != nil {
		t.Error(err)
	}
	// The example's settings are all valid for the Guard.
	if _, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Tools: f.GuardTools()}); err != nil {
		t.Error(err)
	}
}

func TestParse_EmptyFilesSetNothing(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "---\n", "tools:\n"} {
		f, err := Parse("g.yaml", []byte(src))
		if err != nil || len(f.Tools) != 0 || f.CallStatusTool != nil || f.Defaults != (Policy{}) {
			t.Errorf("%q: %+v, %v", src, f, err)
		}
	}
}

// TestParse_ErrorsNameTheFileLineAndSetting: every mistake is refused at
// start, with the line and the setting it is about, and says what to
// write instead.
func TestParse_ErrorsNameTheFileLineAndSetting(t *testing.T) {
	cases := []struct {
		src  string
		want []string
	}{
		{"tool:\n  a: {}\n", []string{"g.yaml:1: tool: unknown setting; the file takes defaults, call_status_tool, tools"}},
		{"tools:\n  a:\n    windw: 5m\n", []string{"g.yaml:3: tools.a.windw: unknown setting; tools.a takes window, lease, wait, failure_policy, protect, status_tool, exclude, round, require_key, version, max_attempts"}},
		{"tools:\n  a:\n    window: 5\n", []string{"g.yaml:3: tools.a.window: 5 has no unit: write 5s, 5m or 5h"}},
		{"tools:\n  a:\n    window: soon\n", []string{`g.yaml:3: tools.a.window: "soon" is not a duration`}},
		{"tools:\n  a:\n    window: 0s\n", []string{"g.yaml:3: tools.a.window: must be positive, got 0s"}},
		{"tools:\n  a:\n    lease: -1m\n", []string{"g.yaml:3: tools.a.lease: must be positive, got -1m"}},
		{"defaults:\n  wait: -1s\n", []string{"g.yaml:2: defaults.wait: must be positive, got -1s"}},
		{"defaults:\n  window: 1000000h\n", []string{"g.yaml:2: defaults.window: 1000000h is over the limit"}},
		{"tools:\n  a:\n    failure_policy: keep\n", []string{`g.yaml:3: tools.a.failure_policy: "keep" is not a failure policy: release`}},
		{"tools:\n  a:\n    protect: yes\n", []string{"g.yaml:3: tools.a.protect: must be true or false"}},
		{"tools:\n  a:\n    protect: false\n    window: 5m\n", []string{"tools.a.window: has no effect: protect is false"}},
		{"tools:\n  a:\n    exclude: requested_at\n", []string{"g.yaml:3: tools.a.exclude: must be a list of argument fields, top-level names or JSON Pointers"}},
		{"tools:\n  a:\n    exclude: [x, x]\n", []string{`g.yaml:3: tools.a.exclude: "x" is listed twice`}},
		{"tools:\n  a:\n    exclude: [x, /order/~2]\n", []string{`g.yaml:3: tools.a.exclude: JSON Pointer "/order/~2": "~" must be followed by 0 or 1`}},
		{"tools:\n  a:\n    exclude:\n      - /a\n      - /b~\n", []string{`g.yaml:5: tools.a.exclude: JSON Pointer "/b~"`}},
		{"tools:\n  a:\n    round: [/sent_at]\n", []string{"g.yaml:3: tools.a.round: must be a mapping of timestamp fields to granularities"}},
		{"tools:\n  a:\n    round:\n      /sent_at: 7m\n", []string{"g.yaml:4: tools.a.round./sent_at: the granularity 7m0s must be positive and divide 24h evenly"}},
		{"tools:\n  a:\n    round:\n      /sent_at: 60\n", []string{"g.yaml:4: tools.a.round./sent_at: 60 has no unit"}},
		{"tools:\n  a:\n    round:\n      /sent_at: 0s\n", []string{"g.yaml:4: tools.a.round./sent_at: must be positive"}},
		{"tools:\n  a:\n    round:\n      /o/~3: 1m\n", []string{`g.yaml:4: tools.a.round: JSON Pointer "/o/~3"`}},
		{"tools:\n  a:\n    round:\n      /at: 1m\n      /at: 1h\n", []string{"g.yaml:5: tools.a.round./at: set twice (first on line 4)"}},
		{"tools:\n  a:\n    exclude: [/at]\n    round: {/at: 1m}\n", []string{`g.yaml:4: tools.a.round: round "/at": the field is excluded too`}},
		{"tools:\n  a:\n    round: {/items/*/at: 1m, /items/0/at: 1h}\n", []string{"g.yaml:3: tools.a.round: ", "may name the same array element"}},
		{"tools:\n  a:\n    protect: false\n    round: {/at: 1m}\n", []string{"tools.a.round: has no effect: protect is false"}},
		{"tools:\n  a:\n    status_tool: a\n", []string{"g.yaml:3: tools.a.status_tool: names the tool itself"}},
		{"tools:\n  a:\n    max_attempts: 0\n", []string{"g.yaml:3: tools.a.max_attempts: must be a whole number of at least 1"}},
		{"tools:\n  a:\n    max_attempts: 2.5\n", []string{"g.yaml:3: tools.a.max_attempts: must be a whole number"}},
		{"tools:\n  a:\n    require_key: 1\n", []string{"g.yaml:3: tools.a.require_key: must be true or false"}},
		{"tools:\n  a:\n    version: ''\n", []string{"g.yaml:3: tools.a.version: must not be empty"}},
		{"tools:\n  a:\n    version: 2\n", []string{"g.yaml:3: tools.a.version: must be a string"}},
		{"tools:\n  a:\n    protect: false\n    require_key: true\n", []string{"tools.a.require_key: has no effect: protect is false"}},
		{"tools:\n  a:\n    confirm: true\n", []string{"g.yaml:3: tools.a.confirm: unknown setting"}},
		{"tools:\n  a:\n    window: 5m\n    window: 6m\n", []string{"g.yaml:4: tools.a.window: set twice (first on line 3)"}},
		{"tools:\n  a: {}\n  a: {}\n", []string{"g.yaml:3: tools.a: set twice (first on line 2)"}},
		{"tools:\n  '': {}\n", []string{"g.yaml:2: tools: a tool name must not be empty"}},
		{"tools: [a, b]\n", []string{"g.yaml:1: tools: must be a mapping"}},
		{"call_status_tool:\n  enabled: false\n  name: x\n", []string{"call_status_tool: names a tool but switches it off"}},
		{"call_status_tool:\n  name: 3\n", []string{"g.yaml:2: call_status_tool.name: must be a string"}},
		{"tools: {a: {window: 5m}}\n---\ntools: {}\n", []string{"g.yaml:2: a second YAML document"}},
		{"tools:\n  a: [\n", []string{"g.yaml: "}},
		// Every error of a file at once.
		{"tools:\n  a:\n    window: x\n  b:\n    lease: y\n", []string{"g.yaml:3: tools.a.window", "g.yaml:5: tools.b.lease"}},
	}
	for _, c := range cases {
		_, err := Parse("g.yaml", []byte(c.src))
		if err == nil {
			t.Errorf("%q: no error", c.src)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", c.src, err, w)
			}
		}
	}
}

func TestCheckLeases_NamesTheToolAndItsLine(t *testing.T) {
	f, err := Parse("g.yaml", []byte("tools:\n  ok:\n    window: 5m\n    lease: 1m\n  short:\n    window: 1m\n  long:\n    lease: 20m\n  never:\n    protect: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = f.CheckLeases(10*time.Minute, 2*time.Minute)
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{
		"g.yaml:6: tools.short.window: short's lease (2m0s) is longer than its window (1m0s)",
		"g.yaml:8: tools.long.lease: long's lease (20m0s) is longer than its window (10m0s)",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "ok") || strings.Contains(err.Error(), "never") {
		t.Errorf("%q names a tool whose lease is fine", err)
	}
}

// TestGuardTools_AZeroWaitOverridesADefaultWait: "wait: 0s" on a tool
// turns off the default wait for it, which a zero ToolConfig.Wait would
// inherit.
func TestGuardTools_AZeroWaitOverridesADefaultWait(t *testing.T) {
	f, err := Parse("g.yaml", []byte("defaults:\n  wait: 5s\ntools:\n  quick:\n    wait: 0s\n  plain:\n    window: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	tools := f.GuardTools()
	if w := tools["quick"].Wait; w <= 0 || w >= time.Millisecond {
		t.Errorf("quick's wait %s: want a positive wait too short to wait", w)
	}
	if w := tools["plain"].Wait; w != 0 {
		t.Errorf("plain's wait %s: want 0 (the default's)", w)
	}
}

// TestParse_TheHelpExample parses the flow-style example of `idemkit
// gateway --help`.
func TestParse_TheHelpExample(t *testing.T) {
	f, err := Parse("help", []byte("defaults: {window: 10m, lease: 2m, failure_policy: release}\ntools:\n  issue_refund: {window: 30m, exclude: [requested_at]}\n  charge_card:  {failure_policy: store}\n  search:       {protect: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Tools["issue_refund"].Window != 30*time.Minute || f.Tools["charge_card"].FailurePolicy != idemkit.StoreToolErrors || *f.Tools["search"].Protect {
		t.Errorf("%+v", f.Tools)
	}
}

// TestParse_SideEffectPolicies: require_key, version and max_attempts are
// the middleware's WithRequireKey, WithToolVersion and
// ToolConfig.MaxAttempts.
func TestParse_SideEffectPolicies(t *testing.T) {
	f, err := Parse("g.yaml", []byte("tools:\n  transfer:\n    require_key: true\n    version: \"2\"\n    max_attempts: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.GuardTools()["transfer"]; got != (idemkit.ToolConfig{MaxAttempts: 3}) {
		t.Errorf("GuardTools %+v", got)
	}
	var c mcpcall.Config
	f.ApplyInstrumentation(&c)
	if !c.RequireKey["transfer"] || c.ToolVersions["transfer"] != "2" {
		t.Errorf("RequireKey %v, ToolVersions %v", c.RequireKey, c.ToolVersions)
	}
}

// TestParse_ExcludePointersAndRound: exclude takes top-level names and
// JSON Pointers, round a mapping of fields to granularities; both reach
// the middleware's configuration as WithExclude and WithRound set it.
func TestParse_ExcludePointersAndRound(t *testing.T) {
	src := "tools:\n  refund:\n    exclude: [nonce, /order/requested_at, /items/*/nonce, /a~1b]\n    round:\n      /sent_at: 1m\n      created: 1h\n"
	f, err := Parse("g.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var c mcpcall.Config
	f.ApplyInstrumentation(&c)
	if got := strings.Join(c.Exclude["refund"], " "); got != "nonce /order/requested_at /items/*/nonce /a~1b" {
		t.Errorf("Exclude %q", got)
	}
	if r := c.Round["refund"]; len(r) != 2 || r["/sent_at"] != time.Minute || r["created"] != time.Hour {
		t.Errorf("Round %v", r)
	}
	if f.Line("tools.refund.round./sent_at") != 5 {
		t.Errorf("the line of /sent_at is %d, want 5", f.Line("tools.refund.round./sent_at"))
	}
	// What the file accepts, the key derivation accepts.
	if _, err := idemkit.NewKey("s", "refund", []byte(`{"sent_at":"2026-12-02T10:00:00Z"}`),
		&idemkit.KeyOptions{Exclude: c.Exclude["refund"], Round: c.Round["refund"]}); err != nil {
		t.Errorf("NewKey with the file's policy: %v", err)
	}
}

// The configuration refuses exactly the tool names the key derivation
// refuses, so that a file never names a tool whose calls could not be keyed.
func TestToolName_AsTheKeyDerivation(t *testing.T) {
	for _, name := range []string{"", "ok", strings.Repeat("a", 256), strings.Repeat("a", 257), "bad\x00", "tab\tname", "\xff", "ünïcode"} {
		_, keyErr := idemkit.NewKey("s", name, []byte(`{}`), nil)
		if cfgErr := toolName(name); (cfgErr == nil) != (keyErr == nil) {
			t.Errorf("tool name %q: configuration says %v, NewKey says %v", name, cfgErr, keyErr)
		}
	}
}
