package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --hash-key-file: a key of at least 16 bytes, surrounding whitespace
// trimmed, reaches the instrumentation (and so every exported hash); a
// missing, short or oversized file is a usage error that says what to do,
// and the gateway does not start.
func TestGateway_HashKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("key", "  c2VjcmV0LWtleS1vZi10aGUtZGVwbG95bWVudA==\n")
	key, err := readHashKey(good)
	if err != nil || string(key) != "c2VjcmV0LWtleS1vZi10aGUtZGVwbG95bWVudA==" {
		t.Fatalf("readHashKey = %q, %v; want the file's key without the whitespace", key, err)
	}
	if k, err := readHashKey(""); k != nil || err != nil {
		t.Fatalf("no file: %q %v, want no key", k, err)
	}
	tel, err := newTelemetry(t.Context(), "", "test")
	if err != nil {
		t.Fatal(err)
	}
	if cfg := instrumentation(tel, gatewayFlags{}, key); !bytes.Equal(cfg.HashKey, key) {
		t.Fatalf("the instrumentation's HashKey is %q, want the file's key", cfg.HashKey)
	}

	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{write("short", "tooshort\n"), "needs at least 16 bytes"},
		{write("empty", "\n"), "needs at least 16 bytes"},
		{write("huge", strings.Repeat("k", 5000)), "should hold only the key"},
	} {
		code, _, errOut := runCLI(t, "gateway", "--store", "memory", "--upstream", "http://127.0.0.1:1/mcp", "--hash-key-file", c.path)
		if code != exitUsage || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "--hash-key-file") {
			t.Errorf("--hash-key-file %s: exit %d, stderr %q; want exit 2 and %q", filepath.Base(c.path), code, errOut, c.want)
		}
		if strings.Contains(errOut, strings.Repeat("k", 40)) {
			t.Errorf("the error repeats the file's contents: %q", errOut)
		}
	}
	_, out, _ := runCLI(t, "gateway", "--help")
	if !strings.Contains(out, "--hash-key-file") || !strings.Contains(out, "plain SHA-256") {
		t.Errorf("gateway --help does not document --hash-key-file and what an unkeyed hash reveals:\n%s", out)
	}
}
