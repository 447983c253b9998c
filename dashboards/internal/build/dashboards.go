package build

//lint:file-ignore SA1019 the classic dashboard model (dashboard.Dashboard) is the one Grafana 10.4 and 11 import; the SDK deprecates it for dashboardv2, which needs Grafana 12's v2 API

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/idemkit-mcp/idemkit/dashboards/internal/metrics"
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

	toolCalls      = reg.Name("tool_calls")
	replays        = reg.Name("replays")
	inProgress     = reg.Name("in_progress")
	claimBucket    = reg.Name("claim_duration") + "_bucket"
	opBucket       = reg.Name("operation_duration") + "_bucket"
	opCount        = reg.Name("operation_duration") + "_count"
	sessionBucket  = reg.Name("session_duration") + "_bucket"
	sessionCount   = reg.Name("session_duration") + "_count"
	finishErrors   = reg.Name("finish_errors")
	groupsTracked  = reg.Name("proc_groups_tracked")
	spansHeld      = reg.Name("proc_spans_held")
	evictions      = reg.Name("proc_evictions")
	lateSpans      = reg.Name("proc_late_spans")
	classified     = reg.Name("proc_spans_classified")
	ignored        = reg.Name("proc_spans_ignored")
	evidenceCopies = reg.Name("proc_evidence_copies")
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
	l.add(14, 8, columnsTable("Gap between original and duplicate, by cause (p50 / p90 / p99)",
		"How long after the first call of a group its duplicates started (the dup connector's idemkit.duplicate.gap histogram, in seconds; each duplicate span carries it as idemkit.duplicate.gap_ms), per cause, over the selected time range. This is what you need to choose the window: the dup processor's `window` (default 10m) and the Guard's key retention must exceed the p99 gap of every cause you want caught, with margin; a duplicate later than the window is not recognised (and not stopped). Quantiles are interpolated inside the connector's gap_buckets (default 10ms to 15m), so they are only as precise as those bounds. The tool filter does not apply (the gap histogram has no tool label).",
		"short",
		[]column{{"idemkit_duplicate_cause", "Cause", ""}, {"Value #A", "p50", dupGapUnit}, {"Value #B", "p90", dupGapUnit}, {"Value #C", "p99", dupGapUnit}, {"Value #D", "Duplicates", ""}},
		tableQuery(q(0.5)), tableQuery(q(0.9)), tableQuery(q(0.99)),
		tableQuery("sum by (idemkit_duplicate_cause) ("+inRange(sel(dupGapCount, st))+")")))
	l.add(10, 8, bargaugePanel("Gap distribution (all causes)",
		"Duplicates over the selected time range per gap bucket, by the bucket's upper bound (le, in "+dupGapUnit+": 0.01 is 10ms, 600 is the default 10-minute window): the shape of the distribution behind the quantiles. Duplicates in the last bucket (+Inf) came later than its bound; widen gap_buckets or the window if it is not empty.",
		"short", thresholds("blue"), nil,
		heatmapQuery("sum by (le) ("+gap+")", "≤ {{le}} "+dupGapUnit)))

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
// call, and the MCP requests and sessions of every server. It reads the
// metrics of package instrument, exported by the servers over OTLP and
// served by the Collector's prometheus exporter, where the service is the
// job label (scrape with honor_labels: true).
func Guard() *dashboard.DashboardBuilder {
	d := newDashboard("idemkit-guard", "idemkit — Guard on the MCP servers",
		"What the idemkit middleware (package instrument) did with each tools/call: executed, replayed, answered in progress, refused (and why), bypassed; the calls whose outcome could not be recorded, so that a duplicate may run them again; how long claiming the key took; and every MCP request and session of the servers (the semantic conventions' mcp.server.operation.duration and mcp.server.session.duration). Source: idemkit_* and mcp_server_* exported by the servers over OTLP and served by the Collector's prometheus exporter, which puts service.name in the job label: scrape it with honor_labels: true.",
		labelVar("job", "Service", "service.name of the MCP servers: every server that exports mcp.server.operation.duration (the job label the Collector's prometheus exporter sets; needs honor_labels: true in the scrape configuration).", opCount, "job"),
		labelVar("tool", "Tool", "gen_ai.tool.name of the tools called. The MCP request and session panels cover every method and ignore this filter.",
			opCount+`{job=~"$job", mcp_method_name="tools/call"}`, "gen_ai_tool_name"),
	)
	jb := `job=~"$job"`
	// mcp.server.operation.duration covers every MCP method; the tool
	// panels read tools/call only.
	toolsCall := `mcp_method_name="tools/call"`
	tl := `gen_ai_tool_name=~"$tool"`
	protected := sel(toolCalls, jb, tl, `idemkit_outcome!="bypassed"`)
	refused := sel(toolCalls, jb, tl, `idemkit_refusal_reason!=""`)
	notRecorded := sel(finishErrors, jb, tl)
	l := newLayout(d)

	l.row("Selected time range")
	l.add(3, 5, statPanel("Protected calls",
		"Calls of protected tools over the selected time range: every outcome but bypassed (executed, replayed, in_progress, takeover, mismatch), and the calls refused before a claim (invalid key or arguments, unscoped caller, store unavailable).",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(protected)+")"), "protected")))
	l.add(3, 5, statPanel("Replayed",
		"Duplicates answered with the stored result of the first call (idemkit_replays_total): each is a side effect that did not happen twice.",
		"short", 0, thresholds("green"),
		instant(or0("sum("+inRange(sel(replays, jb, tl))+")"), "replayed")))
	l.add(3, 5, statPanel("Answered in progress",
		"Duplicates that arrived while the first call was still running, answered 'in progress, do not retry' (idemkit_in_progress_total). Many of them mean a client times out before the tool finishes: use progress notifications or the job-and-poll shape.",
		"short", 0, thresholds("green", 1.0, "yellow"),
		instant(or0("sum("+inRange(sel(inProgress, jb, tl))+")"), "in progress")))
	l.add(3, 5, statPanel("Replay share of protected calls",
		"Replayed divided by protected calls over the selected time range: the share of protected calls that were duplicates answered from the store.",
		"percentunit", 1, thresholds("green", 0.05, "yellow"),
		instant("sum("+inRange(sel(replays, jb, tl))+") / sum("+inRange(protected)+")", "replay share")))
	l.add(3, 5, statPanel("Refused calls",
		"Calls idemkit answered itself instead of running the tool (idemkit.refusal.reason): a duplicate of a call still in progress, a key mismatch, an unscoped caller, invalid key or arguments, the store unavailable, a stored result that cannot be replayed. The answer tells the model what to do next; in every case but in_progress nothing ran for the call. See 'Refused calls by reason'.",
		"short", 0, thresholds("green", 1.0, "yellow"),
		instant(or0("sum("+inRange(refused)+")"), "refused")))
	l.add(3, 5, statPanel("Key mismatches",
		"Calls rejected because an explicit idempotency key was reused with other arguments (outcome mismatch): a client bug, nothing was run.",
		"short", 0, thresholds("green", 1.0, "orange"),
		instant(or0("sum("+inRange(sel(toolCalls, jb, tl, `idemkit_outcome="mismatch"`))+")"), "mismatch")))
	l.add(3, 5, statPanel("Bypassed calls",
		"Calls that ran without a claim (outcome bypassed), by any reason: read-only and idempotent tools (reason unprotected) by design, and write tools that ran unprotected because the call could not be scoped (unscoped, with WithUnscopedCalls(UnscopedBypass)) or no Guard is configured (no_guard). 'Bypassed calls by tool and reason' tells them apart.",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(sel(toolCalls, jb, tl, `idemkit_outcome="bypassed"`))+")"), "bypassed")))
	l.add(3, 5, statPanel("Outcomes not recorded",
		"Calls whose tool ran and whose result reached the caller, but whose outcome idemkit could not record (idemkit_finish_errors_total): the store failed after the finish's retries (store_error), another caller had taken the claim over (lease_lost: the tool outlived its lease without a heartbeat), or the response could not be kept (response_too_large, unencodable). A duplicate of such a call may run the tool again: the one signal of a possible double side effect on a protected tool. The goal is 0: any value is red. See 'Outcomes not recorded by tool and reason'.",
		"short", 0, thresholds("green", 1.0, "red"),
		instant(or0("sum("+inRange(notRecorded)+")"), "not recorded")))

	l.row("Refused calls and outcomes not recorded over the selected time range")
	l.add(12, 8, bargaugePanel("Refused calls by reason",
		"Calls idemkit answered itself over the selected time range, by idemkit.refusal.reason: in_progress (a duplicate of a running call), mismatch (explicit key reused with other arguments), unscoped (the caller cannot be identified: set WithSubject), invalid_key and invalid_arguments (a malformed call), store_unavailable (the claim failed: nothing ran, a retry is safe; look at the store), response_not_kept and result_unreadable (the call ran, its result cannot be replayed).",
		"short", thresholds("blue"), map[string]string{"store_unavailable": "red", "unscoped": "orange", "in_progress": "yellow", "mismatch": "orange"},
		instant("sum by (idemkit_refusal_reason) ("+inRange(refused)+")", "{{idemkit_refusal_reason}}")))
	l.add(12, 8, tablePanel("Outcomes not recorded by tool and reason",
		"Calls whose outcome could not be recorded over the selected time range, by service, tool and idemkit.finish.error. store_error: the store failed to record it until FinishTimeout (look at the store's health); lease_lost: the tool ran longer than its Lease without a heartbeat and a retry took the claim over, so both ran (call instrument.Progress or raise the Lease); response_too_large and unencodable: the result could not be kept (the call is recorded as done without it). The span of each call carries idemkit.finish.error too.",
		"short",
		[][2]string{{"job", "Service"}, {"gen_ai_tool_name", "Tool"}, {"idemkit_finish_error", "Reason"}, {"Value", "Calls"}},
		tableQuery("sum by (job, gen_ai_tool_name, idemkit_finish_error) ("+inRange(notRecorded)+")")))

	l.row("Over time")
	outcome := `label_replace(sum by (idemkit_outcome) (` + rate(sel(toolCalls, jb, tl)) + `), "idemkit_outcome", "refused before claim", "idemkit_outcome", "")`
	l.add(12, 8, timeseriesPanel("Tool calls by outcome",
		"Rate of tool calls by idemkit outcome, stacked: executed (the tool ran), replayed (stored result), in_progress (first call still running), takeover (an expired claim was taken over), mismatch (explicit key reused with other arguments), bypassed (ran without a claim), 'refused before claim' (invalid key or arguments, unscoped caller, store unavailable: no outcome label; see 'Refused calls by reason').",
		"suffix: calls/s", true, map[string]string{"executed": "blue", "replayed": "green", "in_progress": "orange", "takeover": "purple", "mismatch": "red", "bypassed": "text", "refused before claim": "dark-red"}, series(outcome, "{{idemkit_outcome}}")))
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
	l.add(12, 8, timeseriesPanel("Refusal rate by reason",
		"Rate of calls idemkit answered itself, by idemkit.refusal.reason (see 'Refused calls by reason' above for each reason). A rise of store_unavailable is the store failing; of unscoped, callers the server cannot identify.",
		"suffix: calls/s", false, nil,
		series("sum by (idemkit_refusal_reason) ("+rate(refused)+")", "{{idemkit_refusal_reason}}")))
	l.add(12, 8, timeseriesPanel("Bypassed calls by tool and reason",
		"Rate of calls that ran without a claim, by tool and idemkit.bypass.reason: unprotected (read-only or idempotent tools, by design), unscoped (a write tool whose caller could not be identified ran unprotected) and no_guard (instrumentation without a Guard: observe only). A write tool with unscoped or no_guard runs unprotected.",
		"suffix: calls/s", false, nil,
		series("sum by (gen_ai_tool_name, idemkit_bypass_reason) ("+rate(sel(toolCalls, jb, tl, `idemkit_outcome="bypassed"`))+")", "{{gen_ai_tool_name}} {{idemkit_bypass_reason}}")))
	l.add(12, 8, timeseriesPanel("tools/call duration p50 / p99 by tool",
		"Server-side duration of tools/call (the semantic-convention histogram mcp.server.operation.duration, mcp.method.name tools/call): the whole call, tool work included, for protected and unprotected tools.",
		"s", false, nil,
		series("histogram_quantile(0.5, sum by (le, gen_ai_tool_name) ("+rate(sel(opBucket, jb, tl, toolsCall))+"))", "{{gen_ai_tool_name}} p50"),
		series("histogram_quantile(0.99, sum by (le, gen_ai_tool_name) ("+rate(sel(opBucket, jb, tl, toolsCall))+"))", "{{gen_ai_tool_name}} p99")))
	l.add(24, 7, timeseriesPanel("Tool errors by tool and error.type",
		"Rate of tools/call answered with an error, by tool and error.type: tool_error for isError results (which include idemkit's refusals: in progress, mismatch, invalid arguments, store unavailable), a JSON-RPC error code otherwise (from mcp.server.operation.duration).",
		"suffix: calls/s", false, nil,
		series("sum by (gen_ai_tool_name, error_type) ("+rate(sel(opCount, jb, tl, toolsCall, `error_type!=""`))+")", "{{gen_ai_tool_name}} {{error_type}}")))

	l.row("MCP requests and sessions (every method)")
	l.add(12, 8, timeseriesPanel("MCP requests by method",
		"Rate of MCP requests by mcp.method.name (initialize, tools/list, tools/call, ping, …; _OTHER for methods outside the conventions' list), from mcp.server.operation.duration, which the instrumentation records for every request. The tool filter does not apply.",
		"suffix: req/s", true, nil,
		series("sum by (mcp_method_name) ("+rate(sel(opCount, jb))+")", "{{mcp_method_name}}")))
	l.add(12, 8, timeseriesPanel("MCP request duration p50 / p99 by method",
		"Server-side duration of MCP requests by mcp.method.name (mcp.server.operation.duration), interpolated inside the conventions' buckets (10ms to 300s). The tool filter does not apply.",
		"s", false, nil,
		series("histogram_quantile(0.5, sum by (le, mcp_method_name) ("+rate(sel(opBucket, jb))+"))", "{{mcp_method_name}} p50"),
		series("histogram_quantile(0.99, sum by (le, mcp_method_name) ("+rate(sel(opBucket, jb))+"))", "{{mcp_method_name}} p99")))
	l.add(12, 8, timeseriesPanel("MCP request errors by method and error.type",
		"Rate of MCP requests answered with an error, by mcp.method.name and error.type: a JSON-RPC error code (-32602 invalid params, -32601 method not found, -32603 internal error, …), tool_error for a tools/call answered isError, _OTHER otherwise. The tool filter does not apply.",
		"suffix: req/s", false, nil,
		series("sum by (mcp_method_name, error_type) ("+rate(sel(opCount, jb, `error_type!=""`))+")", "{{mcp_method_name}} {{error_type}}")))
	opRange := inRange(sel(opBucket, jb))
	l.add(12, 8, columnsTable("MCP requests by service and method",
		"MCP requests over the selected time range by service and method: how many, how many answered with an error, and the p99 duration (interpolated inside the conventions' buckets). The tool filter does not apply.",
		"short",
		[]column{{"job", "Service", ""}, {"mcp_method_name", "Method", ""}, {"Value #A", "Requests", ""}, {"Value #B", "Errors", ""}, {"Value #C", "p99", "s"}},
		tableQuery("sum by (job, mcp_method_name) ("+inRange(sel(opCount, jb))+")"),
		tableQuery("sum by (job, mcp_method_name) ("+inRange(sel(opCount, jb, `error_type!=""`))+")"),
		tableQuery("histogram_quantile(0.99, sum by (le, job, mcp_method_name) ("+opRange+"))")))
	sessRange := inRange(sel(sessionBucket, jb))
	l.add(12, 8, columnsTable("MCP sessions ended by service",
		"MCP sessions that ended over the selected time range (the client closed them, or the server ended them), by service, with their median and p99 length (mcp.server.session.duration, interpolated inside its buckets). Sessions still open are not counted. Streamable HTTP without sessions (stateless servers, protocol 2026-07-28) has none.",
		"short",
		[]column{{"job", "Service", ""}, {"Value #A", "Sessions", ""}, {"Value #B", "p50", "s"}, {"Value #C", "p99", "s"}},
		tableQuery("sum by (job) ("+inRange(sel(sessionCount, jb))+")"),
		tableQuery("histogram_quantile(0.5, sum by (le, job) ("+sessRange+"))"),
		tableQuery("histogram_quantile(0.99, sum by (le, job) ("+sessRange+"))")))
	l.add(12, 8, timeseriesPanel("MCP session duration p50 / p99 by service",
		"Length of the MCP sessions that ended, per service (mcp.server.session.duration), over each $__rate_interval window: no line while no session ends.",
		"s", false, nil,
		series("histogram_quantile(0.5, sum by (le, job) ("+rate(sel(sessionBucket, jb))+"))", "{{job}} p50"),
		series("histogram_quantile(0.99, sum by (le, job) ("+rate(sel(sessionBucket, jb))+"))", "{{job}} p99")))

	l.row("By tool over the selected time range")
	l.add(24, 8, tablePanel("Calls by tool, outcome and reason",
		"Tool calls over the selected time range by service, tool, outcome, bypass reason and refusal reason (an empty outcome: refused before a claim).",
		"short",
		[][2]string{{"job", "Service"}, {"gen_ai_tool_name", "Tool"}, {"idemkit_outcome", "Outcome"}, {"idemkit_bypass_reason", "Bypass reason"}, {"idemkit_refusal_reason", "Refusal reason"}, {"Value", "Calls"}},
		tableQuery("sum by (job, gen_ai_tool_name, idemkit_outcome, idemkit_bypass_reason, idemkit_refusal_reason) ("+inRange(sel(toolCalls, jb, tl))+")")))
	return d
}

// Processor is the dup processor's health, from the Collector's own
// telemetry endpoint (service.telemetry.metrics; port 8888 by default).
func Processor() *dashboard.DashboardBuilder {
	d := newDashboard("idemkit-dup-processor", "idemkit — dup processor health",
		"Is the otelcol-idemkit Collector's dup processor keeping up: groups in memory against max_groups, spans held for a decision, groups evicted before their window ended, spans that arrived after their decision, what it classified or ignored, and (two tiers) the inference spans tier 1 copied to it as evidence. Source: otelcol_processor_dup_* on the Collector's own telemetry endpoint (service.telemetry.metrics, port 8888 by default), scraped as its own job. The processor exports every counter at 0 from its start.",
		labelVar("instance", "Collector", "The telemetry endpoints (instance label) of the Collectors that run the dup processor.", groupsTracked, "instance"),
	)
	in := `instance=~"$instance"`
	l := newLayout(d)

	l.row("Now and over the selected time range")
	l.add(4, 5, statPanel("Groups tracked",
		"Duplicate groups in memory now, summed over the selected Collectors. Each Collector keeps at most max_groups (default 100000, yellow at 80% of it); past it the oldest groups are evicted and their late duplicates are missed.",
		"short", 0, thresholds("green", 80000.0, "yellow", 100000.0, "red"),
		instant("sum("+sel(groupsTracked, in)+")", "groups")))
	l.add(4, 5, statPanel("Tool spans held",
		"Tool spans held now for a decision (decision_wait, or original_wait for a duplicate whose original has not arrived). Capped by max_held_spans (default 100000).",
		"short", 0, thresholds("green", 80000.0, "yellow"),
		instant("sum("+sel(spansHeld, in)+")", "held")))
	l.add(4, 5, statPanel("Evictions",
		"Groups evicted over the selected time range because max_groups was reached before their window ended: a duplicate of an evicted group looks like a first call. Any eviction is worth a look: raise max_groups or shard with the two-tier setup.",
		"short", 0, thresholds("green", 1.0, "orange"),
		instant(or0("sum("+inRange(sel(evictions, in))+")"), "evictions")))
	l.add(4, 5, statPanel("Late spans",
		"Tool and chat spans over the selected time range that arrived after a decision they would have changed (the decision stands). Raise decision_wait above the export delay of the slowest process when this grows.",
		"short", 0, thresholds("green", 1.0, "yellow"),
		instant(or0("sum("+inRange(sel(lateSpans, in))+")"), "late")))
	l.add(4, 5, statPanel("Evidence copies received",
		"Inference spans (chat, text_completion, generate_content) that a tier-1 Collector copied to the selected tier-2 Collectors over the selected time range (resource idemkit.evidence.copy=true): read to tell a model re-issue from a harness retry, not forwarded. In the two-tier deployment every tier-2 Collector receives every copy; 0 with a single Collector, where the inference spans arrive themselves.",
		"short", 0, thresholds("blue"),
		instant(or0("sum("+inRange(sel(evidenceCopies, in))+")"), "copies")))
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
		"Rate of tool spans passed through untracked: read_only (reads and idempotent tools idemkit bypassed by design, and other instrumentations' calls of read_only_tools: a second run changes nothing), excluded_outcome (a key mismatch, a call idemkit refused before any claim, which never ran, or a bypass reason the processor does not know), no_key (no key could be derived), bad_timestamp, resent (the same span delivered twice by an exporter retry).",
		"suffix: spans/s", false, nil,
		series("sum by (reason) ("+rate(sel(ignored, in))+")", "{{reason}}")))
	l.add(24, 7, timeseriesPanel("Evidence copies received by Collector",
		"Rate of inference spans received as tier-1 evidence copies, per Collector. In the two-tier deployment every tier-2 Collector follows the agents' inference rate; a tier-2 Collector at 0 while the others receive copies is missing from tier 1's evidence exporters, and decides model re-issues as harness retries.",
		"suffix: spans/s", false, nil,
		series("sum by (instance) ("+rate(sel(evidenceCopies, in))+")", "{{instance}}")))

	l.row("Breakdown over the selected time range")
	l.add(6, 8, bargaugePanel("Classified by cause",
		"Tool spans decided over the selected time range by cause (none: not a duplicate).",
		"short", thresholds("blue"), causeColors,
		instant("sum by (cause) ("+inRange(sel(classified, in))+")", "{{cause}}")))
	l.add(6, 8, bargaugePanel("Ignored by reason",
		"Tool spans passed through untracked over the selected time range, by reason (read_only, excluded_outcome, no_key, bad_timestamp, resent).",
		"short", thresholds("blue"), nil,
		instant("sum by (reason) ("+inRange(sel(ignored, in))+")", "{{reason}}")))
	l.add(6, 8, bargaugePanel("Late spans by kind",
		"Spans that arrived after a decision they would have changed, over the selected time range, by kind (tool or chat).",
		"short", thresholds("green", 1.0, "yellow"), nil,
		instant("sum by (span) ("+inRange(sel(lateSpans, in))+")", "{{span}}")))
	l.add(6, 8, bargaugePanel("Evidence copies by Collector",
		"Inference spans received as tier-1 evidence copies over the selected time range, per Collector: in the two-tier deployment every tier-2 Collector should show the same number.",
		"short", thresholds("blue"), nil,
		instant("sum by (instance) ("+inRange(sel(evidenceCopies, in))+")", "{{instance}}")))
	return d
}
