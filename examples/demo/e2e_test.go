package demo_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestDemoEndToEnd runs scripts/demo.sh (the Collector build included) and
// fails when the demo's report does. It runs only with IDEMKIT_DEMO_E2E=1:
//
//	IDEMKIT_DEMO_E2E=1 go test -run TestDemoEndToEnd -v ./examples/demo
//
// CI can call the script directly instead: bash scripts/demo.sh.
func TestDemoEndToEnd(t *testing.T) {
	if os.Getenv("IDEMKIT_DEMO_E2E") != "1" {
		t.Skip("set IDEMKIT_DEMO_E2E=1 to run the demo with the built Collector")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IDEMKIT_DEMO_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	t.Logf("scripts/demo.sh output:\n%s", out)
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v", err)
	}
}
