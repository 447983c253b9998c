package main

import (
	"fmt"
	"slices"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gatewayconfig"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// configHelp is --config's help.
const configHelp = "a YAML file of per-tool settings (window, lease, wait, failure_policy, status_tool, exclude, protect) and defaults for every tool; see the README's example. " +
	"A setting given both here and by a flag is an error"

// loadConfig reads --config, when given, into f: the file's defaults
// become the gateway-wide window and lease. changed reports the flags set
// on the command line. A setting that a flag and the file both give is an
// error naming both, never a silent precedence.
func (f *gatewayFlags) loadConfig(changed func(name string) bool) error {
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

// applyProtection sets the flags' and the file's protect and bypass
// overrides and excluded fields in c.
func (f *gatewayFlags) applyProtection(c *mcpcall.Config) {
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
