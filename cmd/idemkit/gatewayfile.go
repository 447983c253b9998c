package main

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gatewayconfig"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// configHelp is --config's help.
const configHelp = "a YAML file of per-tool settings (window, lease, wait, failure_policy, status_tool, exclude, round, protect, require_key, version, max_attempts) and defaults for every tool; see the README's example. " +
	"A setting given both here and by a flag is an error"

// loadConfig reads --config, when given, into f: the file's defaults
// become the gateway-wide window and lease. changed reports the flags set
// on the command line. A setting that a flag and the file both give is an
// error naming both, never a silent precedence.
func (f *gatewayFlags) loadConfig(changed func(name string) bool) error {
	if err := f.resolveCallStatusTool(nil, changed); err != nil {
		return err
	}
	if f.config == "" {
		return nil
	}
	file, err := gatewayconfig.Load(f.config)
	if err != nil {
		return &usageError{err}
	}
	both := func(flag, setting string) error {
		return usagef("%s and %s (%s:%d) both set the same thing; keep one of the two", flag, setting, file.Path, file.Line(setting))
	}
	d := file.Defaults
	switch {
	case d.Window > 0 && changed("window"):
		return both("--window", "defaults.window")
	case d.Lease > 0 && changed("lease"):
		return both("--lease", "defaults.lease")
	}
	for _, name := range file.ToolNames() {
		if !file.Sets("tools." + name + ".protect") {
			continue
		}
		if slices.Contains(f.protect, name) {
			return both("--protect "+name, "tools."+name+".protect")
		}
		if slices.Contains(f.bypass, name) {
			return both("--bypass "+name, "tools."+name+".protect")
		}
	}
	if err := f.resolveCallStatusTool(file, changed); err != nil {
		return err
	}
	if d.Window > 0 {
		f.window = d.Window
	}
	if d.Lease > 0 {
		f.lease = d.Lease
	}
	if f.lease > f.window {
		return usagef("the lease (%s) must not be longer than the window (%s): a completed call must outlive its claim (from --lease/--window or %s's defaults)", f.lease, f.window, file.Path)
	}
	if err := file.CheckLeases(f.window, f.lease); err != nil {
		return &usageError{err}
	}
	f.file = file
	return nil
}

// resolveCallStatusTool decides the call status tool's name (f.callStatus,
// "" for none) from --call-status-tool and the file's call_status_tool
// section (file may be nil), which must not both be given.
func (f *gatewayFlags) resolveCallStatusTool(file *gatewayconfig.File, changed func(string) bool) error {
	name := f.callStatusFlag
	switch {
	case name == "-":
		name = ""
	case name == "" || strings.TrimSpace(name) != name || strings.ContainsFunc(name, unicode.IsControl):
		return usagef("--call-status-tool %q is not a tool name (give a name, or - for none)", name)
	}
	if file != nil && file.CallStatusTool != nil {
		if changed("call-status-tool") {
			return usagef("--call-status-tool and call_status_tool (%s:%d) both set the same thing; keep one of the two", file.Path, file.Line("call_status_tool"))
		}
		name = file.CallStatusToolName(name)
	}
	if name != "" {
		if slices.Contains(f.protect, name) {
			return usagef("--protect %s: %s is the gateway's call status tool, which is read-only and never protected", name, name)
		}
		if file != nil {
			if t, ok := file.Tools[name]; ok {
				return usagef("%s:%d: tools.%s: %s is the gateway's call status tool, which the gateway answers itself; it takes no per-tool settings (name it otherwise with call_status_tool.name)",
					file.Path, file.Line("tools."+name), name, t.Name)
			}
		}
	}
	f.callStatus = name
	return nil
}

// guardConfig is the Guard's configuration: the gateway-wide window and
// lease, and the file's defaults and per-tool overrides.
func (f *gatewayFlags) guardConfig() *idemkit.Config {
	c := &idemkit.Config{Window: f.window, Lease: f.lease, MaxResponseBytes: f.maxMessage}
	if f.file != nil {
		c.Wait, c.FailurePolicy = f.file.Defaults.Wait, f.file.Defaults.FailurePolicy
		c.Tools = f.file.GuardTools()
	}
	return c
}

// applyToolSettings sets the flags' and the file's protect and bypass
// overrides, excluded fields and call status tool in c.
func (f *gatewayFlags) applyToolSettings(c *mcpcall.Config) {
	c.CallStatusTool = f.callStatus
	for _, t := range f.protect {
		if c.Protect == nil {
			c.Protect = map[string]bool{}
		}
		c.Protect[t] = true
	}
	for _, t := range f.bypass {
		if c.Protect == nil {
			c.Protect = map[string]bool{}
		}
		c.Protect[t] = false
	}
	if f.file != nil {
		f.file.ApplyInstrumentation(c)
	}
}

// describeConfig is the log line's summary of the file.
func (f *gatewayFlags) describeConfig() string {
	if f.file == nil {
		return ""
	}
	return fmt.Sprintf("%s (%d tools)", f.file.Path, len(f.file.Tools))
}
