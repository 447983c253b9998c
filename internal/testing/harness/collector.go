package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RepoRoot returns the repository root: the nearest folder at or above the
// working directory that holds go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work at or above the working directory: run from inside the idemkit repository")
		}
		dir = parent
	}
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// CollectorBinary returns the otelcol-idemkit binary: $IDEMKIT_OTELCOL when
// set, else the one scripts/collector-build.sh builds (seconds when cached,
// minutes on a cold machine; once per process). The build's progress goes
// to progress (may be nil).
func CollectorBinary(ctx context.Context, root string, progress io.Writer) (string, error) {
	if p := os.Getenv("IDEMKIT_OTELCOL"); p != "" {
		return p, nil
	}
	buildOnce.Do(func() {
		if progress == nil {
			progress = io.Discard
		}
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "collector-build.sh"))
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = &out, progress
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("scripts/collector-build.sh: %w (its log: collector/_build/build.log)", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		buildPath = lines[len(lines)-1]
		if st, err := os.Stat(buildPath); err != nil || st.IsDir() {
			buildErr = fmt.Errorf("scripts/collector-build.sh printed %q, which is not the binary", buildPath)
		}
	})
	return buildPath, buildErr
}
