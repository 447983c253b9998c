package dupconnector // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector"

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.uber.org/zap"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector/internal/metadata"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/spanview"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Metric names. They are a public interface: dashboards query the
// Prometheus series they become (see README.md). Never rename one.
const (
	// MetricCalls counts duplicate tool calls by cause, effect, tool and
	// service. The duplicates that ran again (a real double side effect)
	// are its series with idemkit.duplicate.effect="leaked".
	MetricCalls = "idemkit.duplicate.calls"
	// MetricGap is the distribution of the gap, in seconds, from a group's
	// first call to a duplicate, by cause and service.
	MetricGap = "idemkit.duplicate.gap"
	// MetricCandidates counts every tool call the connector saw, duplicate
	// or not, by tool and service: the denominator of a duplicate rate.
	MetricCandidates = "idemkit.duplicate.candidates"
	// MetricUncompared counts the tool calls the dup processor could not
	// compare with other calls (idemkit.duplicate.uncompared: no idemkit
	// key and no captured arguments), by tool and service: their
	// duplicates, if any, are not in MetricCalls.
	MetricUncompared = "idemkit.duplicate.uncompared"
)

// Attribute keys of the metrics' data points.
const (
	attrCause    = sc.DuplicateCause
	attrEffect   = sc.DuplicateEffect
	attrTool     = sc.GenAIToolName
	attrService  = string(semconv.ServiceNameKey)
	attrOverflow = "otel.metric.overflow"
)

// seriesKey identifies one series; unused fields stay empty. overflow marks
// the single series that collects new combinations past max_series.
type seriesKey struct {
	cause, effect, tool, service string
	overflow                     bool
}

type counter struct {
	start pcommon.Timestamp
	value int64
}

type histogram struct {
	start  pcommon.Timestamp
	counts []uint64
	count  uint64
	sum    float64
	min    float64
	max    float64
}

// dupConnector aggregates duplicate annotations into cumulative metrics.
// ConsumeTraces is safe for concurrent use.
type dupConnector struct {
	cfg    *Config
	next   consumer.Metrics
	logger *zap.Logger
	now    func() time.Time
	bounds []float64 // gap bucket bounds, s

	// mu protects the series maps.
	mu         sync.Mutex
	calls      map[seriesKey]*counter
	candidates map[seriesKey]*counter
	uncompared map[seriesKey]*counter
	gaps       map[seriesKey]*histogram

	stop      chan struct{}
	done      sync.WaitGroup
	startOnce sync.Once
	stopOnce  sync.Once
}

var _ connector.Traces = (*dupConnector)(nil)

func newDupConnector(set connector.Settings, cfg *Config, next consumer.Metrics) *dupConnector {
	bounds := make([]float64, len(cfg.GapBuckets))
	for i, b := range cfg.GapBuckets {
		bounds[i] = b.Seconds()
	}
	return &dupConnector{
		cfg:        cfg,
		next:       next,
		logger:     set.Logger,
		now:        time.Now,
		bounds:     bounds,
		calls:      map[seriesKey]*counter{},
		candidates: map[seriesKey]*counter{},
		uncompared: map[seriesKey]*counter{},
		gaps:       map[seriesKey]*histogram{},
		stop:       make(chan struct{}),
	}
}

// Capabilities reports that the connector only reads the spans.
func (c *dupConnector) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// Start starts emitting the metrics every metrics_flush_interval.
func (c *dupConnector) Start(context.Context, component.Host) error {
	c.startOnce.Do(func() {
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			t := time.NewTicker(c.cfg.MetricsFlushInterval)
			defer t.Stop()
			for {
				select {
				case <-c.stop:
					return
				case <-t.C:
					c.flush(context.Background())
				}
			}
		}()
	})
	return nil
}

// Shutdown stops the ticker and emits the metrics one last time.
func (c *dupConnector) Shutdown(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stop) })
	c.done.Wait()
	c.flush(ctx)
	return nil
}

// ConsumeTraces counts the tool spans and the duplicate annotations of td.
// Annotations with values outside the contract's enums are ignored.
func (c *dupConnector) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	now := pcommon.NewTimestampFromTime(c.now())
	c.mu.Lock()
	defer c.mu.Unlock()
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		service := ""
		if v, ok := rs.Resource().Attributes().Get(attrService); ok {
			service = spanview.Scalar(v)
		}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				if spanview.Classify(s) != spanview.Tool {
					continue
				}
				c.observe(s.Attributes(), service, now)
			}
		}
	}
	return nil
}

func (c *dupConnector) observe(attrs pcommon.Map, service string, now pcommon.Timestamp) {
	var tool, cause, effect string
	var dup, uncompared, hasGap bool
	var gap int64
	for k, v := range attrs.All() {
		switch k {
		case sc.GenAIToolName:
			tool = spanview.Scalar(v)
		case sc.Duplicate:
			dup = v.Type() == pcommon.ValueTypeBool && v.Bool()
		case sc.DuplicateUncompared:
			uncompared = v.Type() == pcommon.ValueTypeBool && v.Bool()
		case sc.DuplicateCause:
			cause = spanview.Scalar(v)
		case sc.DuplicateEffect:
			effect = spanview.Scalar(v)
		case sc.DuplicateGapMS:
			if v.Type() == pcommon.ValueTypeInt && v.Int() >= 0 {
				gap, hasGap = v.Int(), true
			}
		}
	}
	c.count(c.candidates, seriesKey{tool: tool, service: service}, now)
	if uncompared && !dup {
		c.count(c.uncompared, seriesKey{tool: tool, service: service}, now)
		return
	}
	if !dup || !validCause(cause) || !validEffect(effect) {
		return
	}
	c.count(c.calls, seriesKey{cause: cause, effect: effect, tool: tool, service: service}, now)
	if hasGap {
		h := c.histogramFor(seriesKey{cause: cause, service: service}, now)
		secs := float64(gap) / 1e3
		i := 0
		for i < len(c.bounds) && secs > c.bounds[i] {
			i++
		}
		h.counts[i]++
		if h.count == 0 || secs < h.min {
			h.min = secs
		}
		if h.count == 0 || secs > h.max {
			h.max = secs
		}
		h.count++
		h.sum += secs
	}
}

func validCause(s string) bool {
	switch s {
	case sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown:
		return true
	}
	return false
}

func validEffect(s string) bool {
	switch s {
	case sc.EffectSuppressed, sc.EffectBlocked, sc.EffectLeaked:
		return true
	}
	return false
}

// count adds one to the series k of m, or to its overflow series when m is full.
func (c *dupConnector) count(m map[seriesKey]*counter, k seriesKey, now pcommon.Timestamp) {
	ctr := m[k]
	if ctr == nil {
		if len(m) >= c.cfg.MaxSeries {
			k = seriesKey{overflow: true}
			ctr = m[k]
		}
		if ctr == nil {
			k.tool, k.service = strings.Clone(k.tool), strings.Clone(k.service)
			ctr = &counter{start: now}
			m[k] = ctr
		}
	}
	ctr.value++
}

func (c *dupConnector) histogramFor(k seriesKey, now pcommon.Timestamp) *histogram {
	h := c.gaps[k]
	if h == nil {
		if len(c.gaps) >= c.cfg.MaxSeries {
			k = seriesKey{overflow: true}
			h = c.gaps[k]
		}
		if h == nil {
			k.service = strings.Clone(k.service)
			h = &histogram{start: now, counts: make([]uint64, len(c.bounds)+1)}
			c.gaps[k] = h
		}
	}
	return h
}

// flush emits every series, cumulative, to the next consumer.
func (c *dupConnector) flush(ctx context.Context) {
	md, ok := c.build(pcommon.NewTimestampFromTime(c.now()))
	if !ok {
		return
	}
	if err := c.next.ConsumeMetrics(ctx, md); err != nil {
		c.logger.Warn("dup connector: the next consumer refused the attribution metrics", zap.Error(err))
	}
}

// build returns the current metrics; ok is false when there is nothing yet.
func (c *dupConnector) build(now pcommon.Timestamp) (pmetric.Metrics, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	md := pmetric.NewMetrics()
	if len(c.candidates) == 0 {
		return md, false
	}
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(metadata.ScopeName)
	c.appendSum(sm.Metrics(), MetricCalls, "Duplicate tool calls, by the layer that caused them (cause), what they did (effect: leaked when it ran again), tool and service.", c.calls, now)
	c.appendGap(sm.Metrics(), now)
	c.appendSum(sm.Metrics(), MetricCandidates, "Tool calls seen, duplicate or not, by tool and service.", c.candidates, now)
	c.appendSum(sm.Metrics(), MetricUncompared, "Tool calls the dup processor could not compare with other calls (no idemkit key, no captured arguments), by tool and service: duplicates among them are not counted.", c.uncompared, now)
	return md, true
}

func (c *dupConnector) appendSum(ms pmetric.MetricSlice, name, desc string, series map[seriesKey]*counter, now pcommon.Timestamp) {
	if len(series) == 0 {
		return
	}
	m := ms.AppendEmpty()
	m.SetName(name)
	m.SetDescription(desc)
	m.SetUnit("{call}")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dps := sum.DataPoints()
	dps.EnsureCapacity(len(series))
	for k, ctr := range series {
		dp := dps.AppendEmpty()
		dp.SetStartTimestamp(ctr.start)
		dp.SetTimestamp(now)
		dp.SetIntValue(ctr.value)
		putKey(dp.Attributes(), k, name)
	}
}

func (c *dupConnector) appendGap(ms pmetric.MetricSlice, now pcommon.Timestamp) {
	if len(c.gaps) == 0 {
		return
	}
	m := ms.AppendEmpty()
	m.SetName(MetricGap)
	m.SetDescription("Time from a duplicate group's first call to a duplicate, by cause and service: choose the window from it.")
	m.SetUnit("s")
	hist := m.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dps := hist.DataPoints()
	for k, h := range c.gaps {
		dp := dps.AppendEmpty()
		dp.SetStartTimestamp(h.start)
		dp.SetTimestamp(now)
		dp.ExplicitBounds().FromRaw(c.bounds)
		dp.BucketCounts().FromRaw(h.counts)
		dp.SetCount(h.count)
		dp.SetSum(h.sum)
		dp.SetMin(h.min)
		dp.SetMax(h.max)
		putKey(dp.Attributes(), k, MetricGap)
	}
}

// putKey writes the attributes of series k of the named metric.
func putKey(attrs pcommon.Map, k seriesKey, metric string) {
	if k.overflow {
		attrs.PutBool(attrOverflow, true)
		return
	}
	switch metric {
	case MetricCalls:
		attrs.PutStr(attrCause, k.cause)
		attrs.PutStr(attrEffect, k.effect)
	case MetricGap:
		attrs.PutStr(attrCause, k.cause)
	}
	if metric != MetricGap {
		attrs.PutStr(attrTool, k.tool)
	}
	attrs.PutStr(attrService, k.service)
}
