package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// causeNone is the telemetry cause of a tool span that is not a duplicate.
const causeNone = "none"

// causes lists the telemetry causes; causeIndexNone is the last.
var causes = [...]string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown, causeNone}

const causeIndexNone = len(causes) - 1

func causeIndex(c string) int {
	for i, x := range causes {
		if x == c {
			return i
		}
	}
	return causeIndexNone
}

// reasons lists the ignore reasons, in the order of counts.ignored.
var reasons = [...]ignoreReason{reasonNoKey, reasonBadTimestamp, reasonExcludedOutcome, reasonResent, reasonReadOnly}

func reasonIndex(r ignoreReason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return 0
}

// Attribute options of the processor's own telemetry, built once (as
// slices, passed on with ...): building them per Add would allocate on every
// call.
var (
	causeOpts = func() (o [len(causes)][]metric.AddOption) {
		for i, c := range causes {
			o[i] = attrOpt("cause", c)
		}
		return o
	}()
	reasonOpts = func() (o [len(reasons)][]metric.AddOption) {
		for i, r := range reasons {
			o[i] = attrOpt("reason", string(r))
		}
		return o
	}()
	lateToolOpts = attrOpt("span", "tool")
	lateChatOpts = attrOpt("span", "chat")
)

func attrOpt(k, v string) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(k, v)))}
}

// counts accumulates the processor's telemetry under its mutex; record
// hands it to the meter outside the mutex, once per call or tick rather
// than once per span.
type counts struct {
	classified     [len(causes)]int64
	ignored        [len(reasons)]int64
	lateTool       int64
	lateChat       int64
	evictions      int64
	evidenceCopies int64
}

// takeCounts returns the telemetry counted since the last call and resets
// it; the caller holds p.mu.
func (p *dupProcessor) takeCounts() counts {
	c := p.counts
	p.counts = counts{}
	return c
}

func (c *counts) record(ctx context.Context, p *dupProcessor) {
	for i, n := range c.classified {
		if n > 0 {
			p.tel.ProcessorDupSpansClassified.Add(ctx, n, causeOpts[i]...)
		}
	}
	for i, n := range c.ignored {
		if n > 0 {
			p.tel.ProcessorDupSpansIgnored.Add(ctx, n, reasonOpts[i]...)
		}
	}
	if c.lateTool > 0 {
		p.tel.ProcessorDupLateSpans.Add(ctx, c.lateTool, lateToolOpts...)
	}
	if c.lateChat > 0 {
		p.tel.ProcessorDupLateSpans.Add(ctx, c.lateChat, lateChatOpts...)
	}
	if c.evictions > 0 {
		p.tel.ProcessorDupEvictions.Add(ctx, c.evictions)
	}
	if c.evidenceCopies > 0 {
		p.tel.ProcessorDupEvidenceCopies.Add(ctx, c.evidenceCopies)
	}
}

// recordZero exports every event counter at 0 when the processor starts,
// so that each series exists before its first event: rate() and increase()
// need a sample before an increment to see it, and a healthy Collector's
// dashboard then shows 0 evictions and 0 late spans instead of "No data".
func recordZero(ctx context.Context, p *dupProcessor) {
	p.tel.ProcessorDupEvictions.Add(ctx, 0)
	p.tel.ProcessorDupEvidenceCopies.Add(ctx, 0)
	p.tel.ProcessorDupLateSpans.Add(ctx, 0, lateToolOpts...)
	p.tel.ProcessorDupLateSpans.Add(ctx, 0, lateChatOpts...)
	for i := range causeOpts {
		p.tel.ProcessorDupSpansClassified.Add(ctx, 0, causeOpts[i]...)
	}
	for i := range reasonOpts {
		p.tel.ProcessorDupSpansIgnored.Add(ctx, 0, reasonOpts[i]...)
	}
}
