package instrument

import (
	"testing"

	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// TestNames_AreTheOnesTheInstrumentationWrites keeps the documented names
// equal to the ones internal/mcpcall writes.
func TestNames_AreTheOnesTheInstrumentationWrites(t *testing.T) {
	for _, tc := range []struct{ ours, written string }{
		{ScopeName, mcpcall.ScopeName},
		{Version, mcpcall.Version},
		{KeyArgument, mcpcall.KeyArgument},
		{KeyMetaKey, mcpcall.KeyMetaKey},
		{ReplayMetaKey, mcpcall.ReplayMetaKey},
		{RefusalMetaKey, mcpcall.RefusalMetaKey},
		{JobMetaKey, mcpcall.JobMetaKey},
		{StatusToolMetaKey, mcpcall.StatusToolMetaKey},
		{MetricToolCalls, mcpcall.MetricToolCalls},
		{MetricClaimDuration, mcpcall.MetricClaimDuration},
		{MetricReplays, mcpcall.MetricReplays},
		{MetricInProgress, mcpcall.MetricInProgress},
		{MetricFinishErrors, mcpcall.MetricFinishErrors},
		{MetricOperationDuration, mcpconv.ServerOperationDuration{}.Name()},
		{MetricSessionDuration, mcpconv.ServerSessionDuration{}.Name()},
	} {
		if tc.ours != tc.written {
			t.Errorf("instrument says %q, the instrumentation writes %q", tc.ours, tc.written)
		}
	}
	if DefaultCaptureBytes != mcpcall.DefaultCaptureBytes {
		t.Error("DefaultCaptureBytes")
	}
	for p, want := range map[UnscopedPolicy]mcpcall.UnscopedPolicy{
		UnscopedRefuse: mcpcall.UnscopedRefuse, UnscopedShare: mcpcall.UnscopedShare, UnscopedBypass: mcpcall.UnscopedBypass,
	} {
		if mcpcall.UnscopedPolicy(p) != want {
			t.Errorf("policy %d", p)
		}
	}
	if mcpcall.DefaultConfig().Unscoped != mcpcall.UnscopedRefuse {
		t.Error("unscoped calls are not refused by default")
	}
}

func TestOptions_Apply(t *testing.T) {
	c := mcpcall.ConfigFrom([]Option{
		WithProtect("a", "b"), WithBypass("b"), WithStatusTool("a", "a_status"), WithExclude("a", "ts"),
		WithUnscopedCalls(UnscopedShare), WithRecordArguments(0), WithRecordResults(10), WithoutKeyParameter(),
		WithKeyArgumentPassedThrough(), WithRawSubject(), WithHashKey([]byte("k")), WithRawSessionID(), nil,
	})
	if !c.Protect["a"] || c.Protect["b"] || c.StatusTools["a"] != "a_status" || c.Exclude["a"][0] != "ts" ||
		c.Unscoped != mcpcall.UnscopedShare || c.ArgumentsCap != DefaultCaptureBytes || c.ResultCap != 10 ||
		c.AdvertiseKey || c.StripKey || !c.RawSubject || string(c.HashKey) != "k" || !c.RawSessionID {
		t.Errorf("%+v", c)
	}
	if old := mcpcall.ConfigFrom([]Option{WithSubjectHashKey([]byte("old"))}); string(old.HashKey) != "old" {
		t.Errorf("WithSubjectHashKey: HashKey %q", old.HashKey)
	}
	d := mcpcall.ConfigFrom([]Option(nil))
	if !d.AdvertiseKey || !d.StripKey || d.Unscoped != mcpcall.UnscopedRefuse || d.HashKey != nil || d.RawSessionID {
		t.Errorf("defaults %+v", d)
	}
}
