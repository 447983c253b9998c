package instrument

import (
	"testing"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

func TestOptions_Apply(t *testing.T) {
	c := mcpcall.ConfigFrom([]Option{
		WithProtect("a", "b"), WithBypass("b"), WithStatusTool("a", "a_status"), WithExclude("a", "ts"),
		WithUnscopedCalls(UnscopedShare), WithRecordArguments(0), WithRecordResults(10), WithoutKeyParameter(),
		WithKeyArgumentPassedThrough(), WithRawSubject(), WithHashKey([]byte("k")), WithRawSessionID(), nil,
	})
	if !c.Protect["a"] || c.Protect["b"] || c.StatusTools["a"] != "a_status" || c.Exclude["a"][0] != "ts" ||
		c.Unscoped != mcpcall.UnscopedShare || c.ArgumentsCap != mcpcall.DefaultCaptureBytes || c.ResultCap != 10 ||
		c.AdvertiseKey || c.StripKey || !c.RawSubject || string(c.HashKey) != "k" || !c.RawSessionID {
		t.Errorf("%+v", c)
	}
	d := mcpcall.ConfigFrom([]Option(nil))
	if !d.AdvertiseKey || !d.StripKey || d.Unscoped != mcpcall.UnscopedRefuse || d.HashKey != nil || d.RawSessionID {
		t.Errorf("defaults %+v", d)
	}
}
