package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayConfig_MistakesAreUsageErrors: a configuration file the
// gateway cannot follow, or that a flag contradicts, stops it before it
// starts anything (exit 2), with the file, the line and the setting.
func TestGatewayConfig_MistakesAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.yaml", "tools:\n  issue_refund:\n    windw: 5m\n")
	defaults := write("defaults.yaml", "defaults:\n  window: 20m\n  lease: 1m\n")
	protect := write("protect.yaml", "tools:\n  search:\n    protect: false\n")
	leases := write("leases.yaml", "tools:\n  export:\n    lease: 30m\n")
	status := write("status.yaml", "call_status_tool:\n  name: check_call\n")
	statusTool := write("statustool.yaml", "tools:\n  idemkit_call_status:\n    window: 1m\n")
	up := []string{"gateway", "--store", "memory", "--upstream", "http://127.0.0.1:1/mcp"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad}, bad + ":3: tools.issue_refund.windw: unknown setting"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "--config: open"},
		{[]string{"--config", defaults, "--window", "5m"}, "--window and defaults.window (" + defaults + ":2) both set the same thing"},
		{[]string{"--config", defaults, "--lease", "5m"}, "--lease and defaults.lease (" + defaults + ":3) both set the same thing"},
		{[]string{"--config", protect, "--protect", "search"}, "--protect search and tools.search.protect (" + protect + ":3) both set the same thing"},
		{[]string{"--config", protect, "--bypass", "search"}, "--bypass search and tools.search.protect"},
		{[]string{"--config", leases}, leases + ":3: tools.export.lease: export's lease (30m0s) is longer than its window (10m0s)"},
		{[]string{"--config", defaults, "--lease", "30m"}, "both set the same thing"},
		{[]string{"--config", status, "--call-status-tool", "other"}, "--call-status-tool and call_status_tool (" + status + ":2) both set the same thing"},
		{[]string{"--config", statusTool}, statusTool + ":2: tools.idemkit_call_status: idemkit_call_status is the gateway's call status tool"},
		{[]string{"--protect", "idemkit_call_status"}, "is the gateway's call status tool, which is read-only and never protected"},
		{[]string{"--call-status-tool", ""}, "is not a tool name"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, append(up[:len(up):len(up)], c.args...)...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
	// The defaults stand in for the flags: a default window shorter than
	// --lease's default is caught as the flags' would be.
	short := write("short.yaml", "defaults:\n  window: 1m\n")
	if code, _, errOut := runCLI(t, append(up[:len(up):len(up)], "--config", short)...); code != exitUsage || !strings.Contains(errOut, "the lease (2m0s) must not be longer than the window (1m0s)") {
		t.Errorf("a default window under the lease: exit %d, %q", code, errOut)
	}
}
