package dupprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadatatest"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// A batch made only of evidence copies is read and dropped: nothing is
// forwarded, the copies are counted, and the chat span they carry decides
// a later duplicate.
func TestProcessor_EvidenceCopiesAreReadAndDropped(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	sink := new(consumertest.TracesSink)
	p, err := newDupProcessor(metadatatest.NewSettings(tt), createDefaultConfig(), sink)
	require.NoError(t, err)
	clock := &fakeClock{t: time.Unix(1_900_000_000, 0)}
	p.now = clock.Now
	ctx := context.Background()
	require.NoError(t, p.ConsumeTraces(ctx, buildTraces(
		sp{tag: "chat", kind: "chat", svc: "agent", trace: "t", at: 100 * time.Millisecond, copy: true},
		sp{tag: "http", kind: "http", svc: "agent", trace: "t", at: 100 * time.Millisecond, copy: true},
	)))
	require.Zero(t, sink.SpanCount(), "evidence copies are not forwarded")
	require.NoError(t, p.ConsumeTraces(ctx, buildTraces(
		sp{tag: "A", trace: "t", key: "k", subject: "u", session: "s", req: "1", at: 0, outcome: sc.OutcomeExecuted},
		sp{tag: "B", trace: "t", key: "k", subject: "u", session: "s", req: "2", at: 300 * time.Millisecond, outcome: sc.OutcomeReplayed},
	)))
	require.NoError(t, p.Shutdown(ctx))
	require.Equal(t, 2, sink.SpanCount())
	out := sink.AllTraces()[0]
	require.Equal(t, sc.CauseModelReissue, dupAttrs(t, out, "B")["B"][sc.DuplicateCause], "the copied chat span is evidence")
	metadatatest.AssertEqualProcessorDupEvidenceCopies(t, tt, []metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
}
