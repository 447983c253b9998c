package dupprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// offlineBatches is a recorded stream in the wrong order: the retry's batch
// comes first, the original's and the chat span's an hour of processing
// time later (an OTLP file read back holds no processing time at all).
func offlineBatches() []ptrace.Traces {
	return []ptrace.Traces{
		buildTraces(
			sp{tag: "http", kind: "http", trace: "t1", at: 0},
			sp{tag: "B", trace: "t1", key: "refund-1", subject: "u-1", session: "s1", req: "8", at: 2 * time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
		),
		buildTraces(
			sp{tag: "chat", kind: "chat", svc: "agent", trace: "t1", at: time.Second},
			sp{tag: "A", trace: "t1", key: "refund-1", subject: "u-1", session: "s1", req: "7", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
		),
	}
}

// The gateway's `idemkit attribute FILE` builds the processor through its
// public factory, feeds it the file's batches and relies on Shutdown to
// release every held span with its annotations: no Start, no ticker.
func TestOffline_FactoryPathReleasesEverythingOnShutdown(t *testing.T) {
	ctx := context.Background()
	sink := new(consumertest.TracesSink)
	p, err := NewFactory().CreateTraces(ctx, processortestSettings(), NewFactory().CreateDefaultConfig(), sink)
	require.NoError(t, err)
	for _, td := range offlineBatches() {
		require.NoError(t, p.ConsumeTraces(ctx, td))
	}
	require.Equal(t, 2, sink.SpanCount(), "the HTTP and chat spans pass at once; the tool spans are held")
	require.NoError(t, p.Shutdown(ctx))
	require.Equal(t, 4, sink.SpanCount(), "Shutdown released every held span")
	out := ptrace.NewTraces()
	for _, td := range sink.AllTraces() {
		td.ResourceSpans().MoveAndAppendTo(out.ResourceSpans())
	}
	got := dupAttrs(t, out, "A", "B")
	require.Equal(t, none(), got["A"])
	require.Equal(t, dup(sc.CauseModelReissue, sc.EffectSuppressed, keyHashOf("refund-1"), "A", 2*time.Second), got["B"])
}

func TestAnnotate_DecidesOnAllTheBatches(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.MaxHeldSpans = 1 // raised to the input's size: nothing is released early
	out, err := Annotate(context.Background(), cfg, offlineBatches()...)
	require.NoError(t, err)
	require.Equal(t, 4, out.SpanCount())
	require.Equal(t, 1, cfg.MaxHeldSpans, "the caller's configuration is not modified")
	got := dupAttrs(t, out, "A", "B")
	require.Equal(t, none(), got["A"])
	require.Equal(t, dup(sc.CauseModelReissue, sc.EffectSuppressed, keyHashOf("refund-1"), "A", 2*time.Second), got["B"])

	bad := createDefaultConfig()
	bad.Window = 0
	_, err = Annotate(context.Background(), bad)
	require.ErrorContains(t, err, "window: must be positive")
}

// ExampleAnnotate attributes recorded spans offline: a harness retry that
// the Guard suppressed.
func ExampleAnnotate() {
	td := buildTraces(
		sp{tag: "A", trace: "t1", key: "refund-1", subject: "u-1", session: "s1", req: "7", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
		sp{tag: "B", trace: "t1", key: "refund-1", subject: "u-1", session: "s1", req: "8", at: 300 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
	)
	out, err := Annotate(context.Background(), nil, td)
	if err != nil {
		panic(err)
	}
	for _, s := range allSpans(out) {
		verdict := "first call"
		if cause, ok := s.Attributes().Get(sc.DuplicateCause); ok {
			effect, _ := s.Attributes().Get(sc.DuplicateEffect)
			verdict = cause.Str() + ", " + effect.Str()
		}
		fmt.Printf("%s: %s\n", s.Name(), verdict)
	}
	// Output:
	// execute_tool issue_refund: first call
	// execute_tool issue_refund: harness_retry, suppressed
}
