package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// EnsureCommand returns the path of command, installing the Debian package
// pkg with apt-get when the command is missing and this process runs as
// root (apt-get update first when the install fails, then once more). It
// fails, naming the package to install, when it cannot. apt-get's output
// goes to log (may be nil).
func EnsureCommand(ctx context.Context, command, pkg string, log io.Writer) (string, error) {
	if p, err := exec.LookPath(command); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s is not installed and this is not root: apt-get install %s (Debian package), then run again", command, pkg)
	}
	if log == nil {
		log = io.Discard
	}
	fmt.Fprintf(log, "harness: installing the Debian package %s (apt-get install %s)\n", pkg, pkg)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		return cmd.Run()
	}
	if err := install(); err != nil {
		update := exec.CommandContext(ctx, "apt-get", "update")
		update.Stdout, update.Stderr = log, log
		_ = update.Run()
		if err := install(); err != nil {
			return "", fmt.Errorf("apt-get install %s: %w", pkg, err)
		}
	}
	p, err := exec.LookPath(command)
	if err != nil {
		return "", fmt.Errorf("%s is still not on PATH after apt-get install %s", command, pkg)
	}
	return p, nil
}

// CI reports whether this runs in CI (CI=true), where a test that cannot
// get what it needs fails instead of skipping.
func CI() bool { return os.Getenv("CI") == "true" }
