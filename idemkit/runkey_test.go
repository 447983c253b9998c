package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/runkey"
)

func TestNewRunKey_NamespacesByKindAndOwner(t *testing.T) {
	id := runkey.NewID()
	if !runkey.ValidID(id) || id == runkey.NewID() {
		t.Fatalf("runkey.NewID: %q (valid %v), and two calls must differ", id, runkey.ValidID(id))
	}
	k, err := idemkit.NewRunKey("task", "user:alice", "issue_refund", id)
	if err != nil {
		t.Fatal(err)
	}
	prefix := runkey.Prefix("task", "user:alice")
	if k.ID() != prefix+id || len(k.ID()) != 64 || k.Tool() != "issue_refund" || k.Fingerprint() != "" {
		t.Fatalf("run key %q tool %q fingerprint %q, want %q+%q", k.ID(), k.Tool(), k.Fingerprint(), prefix, id)
	}
	if strings.Contains(k.ID(), "alice") {
		t.Fatal("the run key carries the raw owner")
	}
	if got, ok := runkey.ID(k.ID()); !ok || got != id {
		t.Fatalf("RunID(%q) = %q, %v", k.ID(), got, ok)
	}
	for _, other := range []string{runkey.Prefix("job", "user:alice"), runkey.Prefix("task", "user:bob"), runkey.Prefix("task", "")} {
		if other == prefix {
			t.Fatalf("two namespaces share the prefix %q", prefix)
		}
	}
	for _, bad := range []string{"", "ABCDEF0123456789abcdef0123456789", id[:31], id + "0", "../" + id[3:]} {
		if _, err := idemkit.NewRunKey("task", "o", "t", bad); !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("NewRunKey with ID %q: %v, want ErrInvalidKey", bad, err)
		}
	}
	if _, ok := runkey.ID("short"); ok {
		t.Error("RunID accepted a key that NewRunKey did not make")
	}
}

// TestGuard_ConfigDerivesAGuardThatOverridesEveryTool is how durable runs
// (internal/runs) derive their Guard from the user's: g.Config, changed,
// then NewGuard on g's store.
func TestGuard_ConfigDerivesAGuardThatOverridesEveryTool(t *testing.T) {
	store := &idemkit.MemoryStore{}
	cfg := &idemkit.Config{Lease: time.Hour, Tools: map[string]idemkit.ToolConfig{"export": {Lease: 2 * time.Hour}}}
	g, err := idemkit.NewGuard(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	gc := g.Config()
	gc.Lease, gc.FailurePolicy = time.Minute, idemkit.StoreToolErrors
	for name, tc := range gc.Tools {
		tc.Lease, tc.FailurePolicy = time.Minute, idemkit.StoreToolErrors
		gc.Tools[name] = tc
	}
	if cfg.Tools["export"].Lease != 2*time.Hour || g.Config().Tools["export"].Lease != 2*time.Hour {
		t.Fatal("changing Config's copy changed the Guard's configuration")
	}
	if gc.FinishTimeout != (10*time.Second) || gc.SweepBatch != idemkit.DefaultSweepBatch {
		t.Errorf("Config FinishTimeout %s, SweepBatch %d: want the defaults filled in", gc.FinishTimeout, gc.SweepBatch)
	}
	short, err := idemkit.NewGuard(g.Store(), &gc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"export", "refund"} {
		k, _ := idemkit.NewKey("s", tool, []byte(`{}`), nil)
		res, err := short.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
			return idemkit.Response{Body: []byte("declined"), IsError: true}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := g.Lookup(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		// StoreToolErrors: the error result is the stored outcome.
		if rec.State != idemstore.StateCompleted || !rec.IsError || res.Outcome != idemkit.OutcomeExecuted {
			t.Fatalf("%s: record %+v, want the error result stored", tool, rec)
		}
		if lease := rec.LeaseUntil.Sub(rec.Started); lease != time.Minute {
			t.Fatalf("%s: lease %s, want the overriding minute", tool, lease)
		}
	}
}
