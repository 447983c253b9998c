package build

//lint:file-ignore SA1019 the classic dashboard model (dashboard.Dashboard) is the one Grafana 10.4 and 11 import; the SDK deprecates it for dashboardv2, which needs Grafana 12's v2 API

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/idemkit/idemkit/dashboards/internal/metrics"
)

// Metric names, as the Prometheus exporters write them, from metrics.json
// by id: renaming a metric is a change of its name there.
var (
	reg           = metrics.MustLoad()
	dupCalls      = reg.Name("dup_calls")
	dupCandidates = reg.Name("dup_candidates")
	dupGapBucket  = reg.Name("dup_gap") + "_bucket"
	dupGapCount   = reg.Name("dup_gap") + "_count"
	dupGapUnit    = must(reg.ByID("dup_gap")).Unit

	toolCalls     = reg.Name("tool_calls")
	replays       = reg.Name("replays")
	inProgress    = reg.Name("in_progress")
	claimBucket   = reg.Name("claim_duration") + "_bucket"
	opBucket      = reg.Name("operation_duration") + "_bucket"
	opCount       = reg.Name("operation_duration") + "_count"
	groupsTracked = reg.Name("proc_groups_tracked")
	spansHeld     = reg.Name("proc_spans_held")
	evictions     = reg.Name("proc_evictions")
	lateSpans     = reg.Name("proc_late_spans")
	classified    = reg.Name("proc_spans_classified")
	ignored       = reg.Name("proc_spans_ignored")
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// File names of the dashboards, in the dashboards folder.
const (
	FileAttribution = "idemkit-duplicate-attribution.json"
	FileGuard       = "idemkit-guard.json"
	FileProcessor   = "idemkit-dup-processor.json"
)

// All returns every dashboard by file name.
func All() (map[string]dashboard.Dashboard, error) {
	out := map[string]dashboard.Dashboard{}
	for name, b := range map[string]*dashboard.DashboardBuilder{
		FileAttribution: Attribution(),
		FileGuard:       Guard(),
		FileProcessor:   Processor(),
	} {
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// Attribution is the headline dashboard: which layer duplicates tool calls,
// and which duplicates became real double side effects. It reads the dup
// connector's metrics.
func Attribution() *dashboard.DashboardBuilder {
	d := newDashboard("idemkit-duplicates", "idemkit — Duplicate tool calls by cause",
		"Which layer (transport retry, harness retry, model re-issue, reconnect replay) duplicates the tool calls of each MCP service, and which duplicates ran again (leaked: a real double side effect). Source: the otelcol-idemkit Collector's dup connector (idemkit_duplicate_*), scraped from its prometheus exporter.",
		labelVar("service", "Service", "service.name of the MCP servers whose tool spans the dup processor saw.", dupCandidates, "service_name"),
		labelVar("tool", "Tool", "gen_ai.tool.name. The gap histogram has no tool label: the gap panels ignore this filter.",
			dupCandidates+`{service_name=~"$service"}`, "gen_ai_tool_name"),
	)
	st := `service_name=~"$service"`
	tl := `gen_ai_tool_name=~"$tool"`
	calls := sel(dupCalls, st, tl)
	leaked := sel(dupCalls, st, tl, `idemkit_duplicate_effect="leaked"`)
	cand := sel(dupCandidates, st, tl)
	l := newLayout(d)

	l.row("Selected time range")
	l.add(6, 5, statPanel("Leaked duplicates (double side effects)",
		"Duplicate tool calls that executed again: each is a real double side effect (a second refund, a second e-mail). Counted over the selected time range; a series that first appears inside the range counts from zero, so a rare first leak is not lost (plain increase() would show 0). The goal is 0: any value is red. See 'Leaked duplicates by cause' for the layer to fix and 'Top tools by leaked duplicates' for where.",
		"short", 0, thresholds("green", 1.0, "red"),
		instant(or0("sum("+inRange(leaked)+")"), "leaked")))
	l.add(6, 5, statPanel("Duplicate tool calls",
		"Every later member of a duplicate group (same subject, tool and canonical arguments, or the same explicit key, inside the dup processor's window) seen in the selected time range, whatever its effect.",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(calls)+")"), "duplicates")))
	l.add(6, 5, statPanel("Stopped by idemkit (suppressed + blocked)",
		"Duplicates that did not run the tool again: answered with the stored result (suppressed) or told the first call is still in progress (blocked). Only services protected by the idemkit Guard can stop duplicates.",
		"short", 0, thresholds("green"),
		instant(or0("sum("+inRange(sel(dupCalls, st, tl, `idemkit_duplicate_effect=~"suppressed|blocked"`))+")"), "stopped")))
	l.add(6, 5, statPanel("Duplicate share of tool calls",
		"Duplicates divided by all tool spans the dup processor saw (idemkit_duplicate_candidates_total), over the selected time range. Above 1% (yellow) a layer retries more than it should; above 5% (red) look at the cause breakdown.",
		"percentunit", 1, thresholds("green", 0.01, "yellow", 0.05, "red"),
		instant("sum("+inRange(calls)+") / sum("+inRange(cand)+")", "share")))

	l.row("Over time")
	l.add(12, 8, timeseriesPanel("Duplicate calls by cause",
		"Rate of duplicate tool calls by the layer that produced them (idemkit.duplicate.cause), stacked: transport_retry (same session and JSON-RPC id: a proxy or HTTP client re-sent the request), harness_retry (same session, new request id, quickly, no model turn between), model_reissue (the model spoke between, or seconds apart), reconnect_replay (a new MCP session re-sent the call), unknown (stdio or stateless sessions: no evidence).",
		"suffix: calls/s", true, causeColors,
		series("sum by (idemkit_duplicate_cause) ("+rate(calls)+")", "{{idemkit_duplicate_cause}}")))
	l.add(12, 8, timeseriesPanel("Duplicate calls by effect",
		"Rate of duplicate tool calls by what they did (idemkit.duplicate.effect), stacked: suppressed (idemkit replayed the stored result), blocked (idemkit answered 'in progress'), leaked (the tool ran again: a double side effect).",
		"suffix: calls/s", true, effectColors,
		series("sum by (idemkit_duplicate_effect) ("+rate(calls)+")", "{{idemkit_duplicate_effect}}")))
	l.add(12, 8, timeseriesPanel("Leaked duplicates by service and tool",
		"Rate of duplicates that executed again, per service and tool: the tools to protect (or whose idempotency is broken) first.",
		"suffix: calls/s", false, nil,
		series("sum by (service_name, gen_ai_tool_name) ("+rate(leaked)+")", "{{service_name}} / {{gen_ai_tool_name}}")))
	l.add(12, 8, timeseriesPanel("Duplicate share of tool calls by service",
		"Duplicates divided by all tool spans seen, per service, over each $__rate_interval window.",
		"percentunit", false, nil,
		series("sum by (service_name) ("+rate(calls)+") / sum by (service_name) ("+rate(cand)+")", "{{service_name}}")))
	l.add(24, 7, timeseriesPanel("Tool calls seen by the dup processor",
		"Rate of tool spans (execute_tool) the dup processor saw, per service and tool: the denominator of the duplicate share. A service missing here sends no tool spans to this Collector.",
		"suffix: calls/s", false, nil,
		series("sum by (service_name, gen_ai_tool_name) ("+rate(cand)+")", "{{service_name}} / {{gen_ai_tool_name}}")))

	l.row("Breakdown over the selected time range")
	l.add(8, 8, bargaugePanel("Duplicates by cause",
		"Duplicate tool calls over the selected time range, by the layer that produced them. Counts series born inside the range from zero.",
		"short", thresholds("blue"), causeColors,
		instant("sum by (idemkit_duplicate_cause) ("+inRange(calls)+")", "{{idemkit_duplicate_cause}}")))
	l.add(8, 8, bargaugePanel("Duplicates by effect",
		"Duplicate tool calls over the selected time range, by effect: suppressed and blocked were stopped by idemkit, leaked ran again.",
		"short", thresholds("blue"), effectColors,
		instant("sum by (idemkit_duplicate_effect) ("+inRange(calls)+")", "{{idemkit_duplicate_effect}}")))
	l.add(8, 8, bargaugePanel("Leaked duplicates by cause",
		"Double side effects over the selected time range, by the layer that produced the duplicate: the layer to fix (or the tool to protect with idemkit).",
		"short", thresholds("red"), causeColors,
		instant("sum by (idemkit_duplicate_cause) ("+inRange(leaked)+")", "{{idemkit_duplicate_cause}}")))

	l.row("Gap between a call and its duplicate: choosing the window")
	gap := inRange(sel(dupGapBucket, st))
	q := func(phi float64) string {
		return fmt.Sprintf("histogram_quantile(%g, sum by (le, idemkit_duplicate_cause) (%s))", phi, gap)
	}
	l.add(14, 8, tablePanel("Gap between original and duplicate, by cause (p50 / p90 / p99)",
		"How long after the first call of a group its duplicates started (idemkit.duplicate.gap_ms; the histogram is in "+dupGapUnit+"), per cause, over the selected time range. This is what you need to choose the window: the dup processor's `window` (default 10m) and the Guard's key retention must exceed the p99 gap of every cause you want caught, with margin; a duplicate later than the window is not recognised (and not stopped). Quantiles are interpolated inside the connector's gap_buckets, so they are only as precise as those bounds. The tool filter does not apply (the gap histogram has no tool label).",
		dupGapUnit,
		[][2]string{{"idemkit_duplicate_cause", "Cause"}, {"Value #A", "p50"}, {"Value #B", "p90"}, {"Value #C", "p99"}, {"Value #D", "Duplicates"}},
		tableQuery(q(0.5)), tableQuery(q(0.9)), tableQuery(q(0.99)),
		tableQuery("sum by (idemkit_duplicate_cause) ("+inRange(sel(dupGapCount, st))+")")))
	l.add(10, 8, bargaugePanel("Gap distribution (all causes)",
		"Duplicates over the selected time range per gap bucket (upper bound in "+dupGapUnit+"): the shape of the distribution behind the quantiles. Duplicates in the last bucket came later than its bound; widen gap_buckets or the window if it is not empty.",
		"short", thresholds("blue"), nil,
		heatmapQuery("sum by (le) ("+gap+")", "{{le}}")))

	l.row("Where: top offenders over the selected time range")
	l.add(10, 9, tablePanel("Top tools by leaked duplicates",
		"The ten service/tool pairs with the most double side effects over the selected time range.",
		"short",
		[][2]string{{"service_name", "Service"}, {"gen_ai_tool_name", "Tool"}, {"Value", "Leaked duplicates"}},
		tableQuery("topk(10, sum by (service_name, gen_ai_tool_name) ("+inRange(leaked)+"))")))
	l.add(14, 9, tablePanel("Attribution matrix",
		"Every duplicate over the selected time range by service, tool, cause and effect.",
		"short",
		[][2]string{{"service_name", "Service"}, {"gen_ai_tool_name", "Tool"}, {"idemkit_duplicate_cause", "Cause"}, {"idemkit_duplicate_effect", "Effect"}, {"Value", "Duplicates"}},
		tableQuery("sum by (service_name, gen_ai_tool_name, idemkit_duplicate_cause, idemkit_duplicate_effect) ("+inRange(calls)+")")))
	return d
}

// Guard is the server side: what the idemkit middleware did with each tool
// call. It reads the metrics of package instrument, exported by the servers
// over OTLP and served by the Collector's prometheus exporter, where the
// service is the job label (scrape with honor_labels: true).
func Guard() *dashboard.DashboardBuilder {
	d := newDashboard("idemkit-guard", "idemkit — Guard on the MCP servers",
		"What the idemkit middleware (package instrument) did with each tools/call: executed, replayed, answered in progress, rejected as a key mismatch, or bypassed; and how long claiming the key took. Source: idemkit_* and mcp_server_operation_duration_seconds_* exported by the servers over OTLP and served by the Collector's prometheus exporter, which puts service.name in the job label: scrape it with honor_labels: true.",
		labelVar("job", "Service", "service.name of the servers (the job label the Collector's prometheus exporter sets; needs honor_labels: true in the scrape configuration).", toolCalls, "job"),
		labelVar("tool", "Tool", "gen_ai.tool.name.", toolCalls+`{job=~"$job"}`, "gen_ai_tool_name"),
	)
	jb := `job=~"$job"`
	// mcp.server.operation.duration covers every MCP method; the tool
	// panels read tools/call only.
	toolsCall := `mcp_method_name="tools/call"`
	tl := `gen_ai_tool_name=~"$tool"`
	protected := sel(toolCalls, jb, tl, `idemkit_outcome!="bypassed"`)
	l := newLayout(d)

	l.row("Selected time range")
	l.add(4, 5, statPanel("Protected calls",
		"Calls of protected tools over the selected time range: every outcome but bypassed (executed, replayed, in_progress, takeover, mismatch, and calls rejected before a claim: invalid key or arguments, store unavailable).",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(protected)+")"), "protected")))
	l.add(4, 5, statPanel("Replayed",
		"Duplicates answered with the stored result of the first call (idemkit_replays_total): each is a side effect that did not happen twice.",
		"short", 0, thresholds("green"),
		instant(or0("sum("+inRange(sel(replays, jb, tl))+")"), "replayed")))
	l.add(4, 5, statPanel("Answered in progress",
		"Duplicates that arrived while the first call was still running, answered 'in progress, do not retry' (idemkit_in_progress_total). Many of them mean a client times out before the tool finishes: use progress notifications or the job-and-poll shape.",
		"short", 0, thresholds("green", 1.0, "yellow"),
		instant(or0("sum("+inRange(sel(inProgress, jb, tl))+")"), "in progress")))
	l.add(4, 5, statPanel("Replay share of protected calls",
		"Replayed divided by protected calls over the selected time range: the share of protected calls that were duplicates answered from the store.",
		"percentunit", 1, thresholds("green", 0.05, "yellow"),
		instant("sum("+inRange(sel(replays, jb, tl))+") / sum("+inRange(protected)+")", "replay share")))
	l.add(4, 5, statPanel("Key mismatches",
		"Calls rejected because an explicit idempotency key was reused with other arguments (outcome mismatch): a client bug, nothing was run.",
		"short", 0, thresholds("green", 1.0, "orange"),
		instant(or0("sum("+inRange(sel(toolCalls, jb, tl, `idemkit_outcome="mismatch"`))+")"), "mismatch")))
	l.add(4, 5, statPanel("Bypassed calls",
		"Calls that ran without a claim (outcome bypassed). Read-only and idempotent tools (reason 'unprotected') are bypassed by design; a write tool bypassed because the call could not be scoped ('unscoped') or because no Guard is configured ('no_guard') is not protected. The reason is on the span (idemkit.bypass.reason) but not a metric label, so this number cannot tell them apart: see 'Calls by tool and outcome' for which tools they were.",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(sel(toolCalls, jb, tl, `idemkit_outcome="bypassed"`))+")"), "bypassed")))

	l.row("Over time")
	outcome := `label_replace(sum by (idemkit_outcome) (` + rate(sel(toolCalls, jb, tl)) + `), "idemkit_outcome", "rejected before claim", "idemkit_outcome", "")`
	l.add(12, 8, timeseriesPanel("Tool calls by outcome",
		"Rate of tool calls by idemkit outcome, stacked: executed (the tool ran), replayed (stored result), in_progress (first call still running), takeover (an expired claim was taken over), mismatch (explicit key reused with other arguments), bypassed (ran without a claim), 'rejected before claim' (invalid key or arguments, store unavailable: no outcome label).",
		"suffix: calls/s", true, map[string]string{"executed": "blue", "replayed": "green", "in_progress": "orange", "takeover": "purple", "mismatch": "red", "bypassed": "text", "rejected before claim": "dark-red"}, series(outcome, "{{idemkit_outcome}}")))
	l.add(12, 8, timeseriesPanel("Replay and in-progress share of protected calls",
		"Share of protected calls answered from the store (replayed) and answered 'in progress' (in_progress), per $__rate_interval window.",
		"percentunit", false, nil,
		series("sum("+rate(sel(replays, jb, tl))+") / sum("+rate(protected)+")", "replayed"),
		series("sum("+rate(sel(inProgress, jb, tl))+") / sum("+rate(protected)+")", "in progress")))
	l.add(12, 8, timeseriesPanel("Claim latency p50 / p99 by tool",
		"Time from the start of the claim to the start of the work, or to the answer for a duplicate (idemkit_claim_duration_seconds): the cost idemkit adds to each protected call, dominated by the store's round trip.",
		"s", false, nil,
		series("histogram_quantile(0.5, sum by (le, gen_ai_tool_name) ("+rate(sel(claimBucket, jb, tl))+"))", "{{gen_ai_tool_name}} p50"),
		series("histogram_quantile(0.99, sum by (le, gen_ai_tool_name) ("+rate(sel(claimBucket, jb, tl))+"))", "{{gen_ai_tool_name}} p99")))
	l.add(12, 8, timeseriesPanel("Mismatches and bypassed calls by tool",
		"Rate of key mismatches (client bugs) and bypassed calls per tool. A write tool among the bypassed ones runs unprotected (unscoped call or no Guard).",
		"suffix: calls/s", false, nil,
		series("sum by (gen_ai_tool_name, idemkit_outcome) ("+rate(sel(toolCalls, jb, tl, `idemkit_outcome=~"mismatch|bypassed"`))+")", "{{gen_ai_tool_name}} {{idemkit_outcome}}")))
	l.add(12, 8, timeseriesPanel("tools/call duration p50 / p99 by tool",
		"Server-side duration of tools/call (the semantic-convention histogram mcp.server.operation.duration), recorded when the server is instrumented WithOperationDuration: the whole call, tool work included, for protected and unprotected tools.",
		"s", false, nil,
		series("histogram_quantile(0.5, sum by (le, gen_ai_tool_name) ("+rate(sel(opBucket, jb, tl, toolsCall))+"))", "{{gen_ai_tool_name}} p50"),
		series("histogram_quantile(0.99, sum by (le, gen_ai_tool_name) ("+rate(sel(opBucket, jb, tl, toolsCall))+"))", "{{gen_ai_tool_name}} p99")))
	l.add(12, 8, timeseriesPanel("Tool errors by tool and error.type",
		"Rate of tools/call answered with an error, by error.type (tool_error for isError results, which include idemkit's in-progress and mismatch answers), from mcp.server.operation.duration.",
		"suffix: calls/s", false, nil,
		series("sum by (gen_ai_tool_name, error_type) ("+rate(sel(opCount, jb, tl, toolsCall, `error_type!=""`))+")", "{{gen_ai_tool_name}} {{error_type}}")))

	l.row("By tool over the selected time range")
	l.add(24, 8, tablePanel("Calls by tool and outcome",
		"Tool calls over the selected time range by service, tool and outcome (empty outcome: rejected before a claim).",
		"short",
		[][2]string{{"job", "Service"}, {"gen_ai_tool_name", "Tool"}, {"idemkit_outcome", "Outcome"}, {"Value", "Calls"}},
		tableQuery("sum by (job, gen_ai_tool_name, idemkit_outcome) ("+inRange(sel(toolCalls, jb, tl))+")")))
	return d
}

// Processor is the dup processor's health, from the Collector's own
// telemetry endpoint (service.telemetry.metrics; port 8888 by default).
func Processor() *dashboard.DashboardBuilder {
	d := newDashboard("idemkit-dup-processor", "idemkit — dup processor health",
		"Is the otelcol-idemkit Collector's dup processor keeping up: groups in memory against max_groups, spans held for a decision, groups evicted before their window ended, spans that arrived after their decision, and what it classified or ignored. Source: otelcol_processor_dup_* on the Collector's own telemetry endpoint (service.telemetry.metrics, port 8888 by default), scraped as its own job.",
		labelVar("instance", "Collector", "The Collector telemetry endpoints scraped (instance label).", groupsTracked, "instance"),
	)
	in := `instance=~"$instance"`
	l := newLayout(d)

	l.row("Now and over the selected time range")
	l.add(5, 5, statPanel("Groups tracked",
		"Duplicate groups in memory now, summed over the selected Collectors. Each Collector keeps at most max_groups (default 100000, yellow at 80% of it); past it the oldest groups are evicted and their late duplicates are missed.",
		"short", 0, thresholds("green", 80000.0, "yellow", 100000.0, "red"),
		instant("sum("+sel(groupsTracked, in)+")", "groups")))
	l.add(5, 5, statPanel("Tool spans held",
		"Tool spans held now for a decision (decision_wait, or original_wait for a duplicate whose original has not arrived). Capped by max_held_spans (default 100000).",
		"short", 0, thresholds("green", 80000.0, "yellow"),
		instant("sum("+sel(spansHeld, in)+")", "held")))
	l.add(5, 5, statPanel("Evictions",
		"Groups evicted over the selected time range because max_groups was reached before their window ended: a duplicate of an evicted group looks like a first call. Any eviction is worth a look: raise max_groups or shard with the two-tier setup.",
		"short", 0, thresholds("green", 1.0, "orange"),
		instant(or0("sum("+inRange(sel(evictions, in))+")"), "evictions")))
	l.add(5, 5, statPanel("Late spans",
		"Tool and chat spans over the selected time range that arrived after a decision they would have changed (the decision stands). Raise decision_wait above the export delay of the slowest process when this grows.",
		"short", 0, thresholds("green", 1.0, "yellow"),
		instant(or0("sum("+inRange(sel(lateSpans, in))+")"), "late")))
	l.add(4, 5, statPanel("Duplicate share of decided spans",
		"Tool spans classified as duplicates (any cause but none) divided by all tool spans decided, over the selected time range.",
		"percentunit", 1, thresholds("green", 0.05, "yellow"),
		instant("sum("+inRange(sel(classified, in, `cause!="none"`))+") / sum("+inRange(sel(classified, in))+")", "duplicates")))

	l.row("Over time")
	l.add(12, 8, timeseriesPanel("Groups tracked by Collector",
		"Duplicate groups in memory per Collector. A flat line at max_groups means the processor is evicting.",
		"short", false, nil,
		series("sum by (instance) ("+sel(groupsTracked, in)+")", "{{instance}}")))
	l.add(12, 8, timeseriesPanel("Tool spans held by Collector",
		"Tool spans held for a decision per Collector: about (tool spans per second) × decision_wait in steady state.",
		"short", false, nil,
		series("sum by (instance) ("+sel(spansHeld, in)+")", "{{instance}}")))
	l.add(12, 8, timeseriesPanel("Evictions by Collector",
		"Rate of groups evicted before their window ended (max_groups reached).",
		"suffix: groups/s", false, nil,
		series("sum by (instance) ("+rate(sel(evictions, in))+")", "{{instance}}")))
	l.add(12, 8, timeseriesPanel("Late spans by Collector and kind",
		"Rate of spans that arrived after a decision they would have changed: tool (a late original: its duplicate was taken for a first call) or chat (a late model turn: a model re-issue was taken for a harness retry).",
		"suffix: spans/s", false, nil,
		series("sum by (instance, span) ("+rate(sel(lateSpans, in))+")", "{{instance}} {{span}}")))
	l.add(12, 8, timeseriesPanel("Tool spans classified by cause",
		"Rate of tool spans decided, stacked by the cause given (none: not a duplicate).",
		"suffix: spans/s", true, causeColors,
		series("sum by (cause) ("+rate(sel(classified, in))+")", "{{cause}}")))
	l.add(12, 8, timeseriesPanel("Tool spans ignored by reason",
		"Rate of tool spans passed through untracked: no_key (no key could be derived), bad_timestamp, excluded_outcome (idemkit outcome bypassed or mismatch: not duplicates by definition), resent (the same span delivered twice by an exporter retry).",
		"suffix: spans/s", false, nil,
		series("sum by (reason) ("+rate(sel(ignored, in))+")", "{{reason}}")))

	l.row("Breakdown over the selected time range")
	l.add(8, 8, bargaugePanel("Classified by cause",
		"Tool spans decided over the selected time range by cause (none: not a duplicate).",
		"short", thresholds("blue"), causeColors,
		instant("sum by (cause) ("+inRange(sel(classified, in))+")", "{{cause}}")))
	l.add(8, 8, bargaugePanel("Ignored by reason",
		"Tool spans passed through untracked over the selected time range, by reason.",
		"short", thresholds("blue"), nil,
		instant("sum by (reason) ("+inRange(sel(ignored, in))+")", "{{reason}}")))
	l.add(8, 8, bargaugePanel("Late spans by kind",
		"Spans that arrived after a decision they would have changed, over the selected time range, by kind (tool or chat).",
		"short", thresholds("yellow"), nil,
		instant("sum by (span) ("+inRange(sel(lateSpans, in))+")", "{{span}}")))
	return d
}
