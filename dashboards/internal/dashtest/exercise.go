package dashtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/dashboards/internal/metrics"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// The processor's telemetry the exercise reads, from metrics.json.
var (
	mClassified = metrics.MustLoad().Name("proc_spans_classified")
	mLateSpans  = metrics.MustLoad().Name("proc_late_spans")
	mEvictions  = metrics.MustLoad().Name("proc_evictions")
	mSpansHeld  = metrics.MustLoad().Name("proc_spans_held")
)

// ExerciseResult is what Exercise made the processor count, read back from
// the Collector's own telemetry endpoint once everything was decided.
type ExerciseResult struct {
	Telemetry  string             `json:"telemetry"`
	Spans      int                `json:"spans_sent"`
	Evictions  float64            `json:"evictions"`
	LateSpans  map[string]float64 `json:"late_spans"`
	Classified map[string]float64 `json:"classified"`
}

// Exercise sends synthetic tool and chat spans (OTLP/JSON over HTTP) to a
// Collector running the dup processor with a small max_groups, so that it
// counts what the demo never causes: a late tool span (an original that
// arrives after its duplicate was decided as a first call), a late chat
// span (a model turn that arrives after a harness retry was decided) and
// evictions (more groups than max_groups). It waits for each counter to
// grow on the Collector's telemetry endpoint and fails when one does not.
func Exercise(ctx context.Context, otlpURL, telemetryURL string, maxGroups int) (*ExerciseResult, error) {
	ex := &exerciser{otlp: strings.TrimRight(otlpURL, "/") + "/v1/traces", tel: telemetryURL,
		base: time.Now().Add(-time.Minute), run: randHex(4)}

	// 1. A late original: the duplicate (later start) is decided alone,
	// then its original (earlier start) arrives.
	before, err := ex.counter(ctx, mClassified, nil)
	if err != nil {
		return nil, err
	}
	k1, t1 := randHex(16), randHex(16)
	if err := ex.send(ctx, ex.tool(k1, t1, "exercise-s1", "2", time.Second, "executed")); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "the lone duplicate to be decided", mClassified, nil, before+1, -1); err != nil {
		return nil, err
	}
	if err := ex.send(ctx, ex.tool(k1, t1, "exercise-s1", "1", 0, "executed")); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "a late tool span", mLateSpans, map[string]string{"span": "tool"}, 1, -1); err != nil {
		return nil, err
	}

	// 2. A late model turn: a harness retry is decided, then the chat span
	// that started between the two calls arrives.
	k2, t2 := randHex(16), randHex(16)
	if err := ex.send(ctx,
		ex.tool(k2, t2, "exercise-s2", "1", 10*time.Second, "executed"),
		ex.tool(k2, t2, "exercise-s2", "2", 10*time.Second+300*time.Millisecond, "in_progress")); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "a harness retry", mClassified, map[string]string{"cause": "harness_retry"}, 1, -1); err != nil {
		return nil, err
	}
	if err := ex.send(ctx, ex.chat(t2, 10*time.Second+100*time.Millisecond)); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "a late chat span", mLateSpans, map[string]string{"span": "chat"}, 1, -1); err != nil {
		return nil, err
	}

	// 3. Evictions: more groups than max_groups.
	var spans []map[string]any
	for i := 0; i < maxGroups+4; i++ {
		spans = append(spans, ex.tool(randHex(16), randHex(16), fmt.Sprintf("exercise-g%d", i), "1", 20*time.Second+time.Duration(i)*time.Millisecond, "executed"))
	}
	if err := ex.send(ctx, spans...); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "evictions", mEvictions, nil, 1, -1); err != nil {
		return nil, err
	}
	// Everything decided: every tool span sent classified once, nothing
	// held any more.
	if err := ex.waitFor(ctx, "every tool span to be decided", mClassified, nil, before+float64(ex.tools), -1); err != nil {
		return nil, err
	}
	if err := ex.waitFor(ctx, "no span held", mSpansHeld, nil, 0, 0); err != nil {
		return nil, err
	}
	samples, err := harness.Scrape(ctx, ex.tel)
	if err != nil {
		return nil, err
	}
	return &ExerciseResult{Telemetry: telemetryURL, Spans: ex.sent,
		Evictions:  samples.Total(mEvictions, nil),
		LateSpans:  samples.By(mLateSpans, "span", nil),
		Classified: samples.By(mClassified, "cause", nil),
	}, nil
}

type exerciser struct {
	otlp, tel string
	base      time.Time
	run       string
	sent      int // spans sent
	tools     int // tool spans sent
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func str(k, v string) map[string]any {
	return map[string]any{"key": k, "value": map[string]any{"stringValue": v}}
}

func nanos(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }

// tool is an execute_tool span as instrument writes it, at base+at.
func (ex *exerciser) tool(key, trace, session, requestID string, at time.Duration, outcome string) map[string]any {
	start := ex.base.Add(at)
	return map[string]any{
		"traceId": trace, "spanId": randHex(8), "name": "execute_tool exercise_refund", "kind": 1,
		"startTimeUnixNano": nanos(start), "endTimeUnixNano": nanos(start.Add(50 * time.Millisecond)),
		"attributes": []any{
			str("gen_ai.operation.name", "execute_tool"), str("gen_ai.tool.name", "exercise_refund"),
			str("mcp.method.name", "tools/call"), str("mcp.session.id", session+"-"+ex.run),
			str("jsonrpc.request.id", requestID), str("idemkit.key.hash", key), str("idemkit.outcome", outcome),
		},
	}
}

// chat is an inference span of trace at base+at.
func (ex *exerciser) chat(trace string, at time.Duration) map[string]any {
	start := ex.base.Add(at)
	return map[string]any{
		"traceId": trace, "spanId": randHex(8), "name": "chat exercise-model", "kind": 3,
		"startTimeUnixNano": nanos(start), "endTimeUnixNano": nanos(start.Add(50 * time.Millisecond)),
		"attributes": []any{str("gen_ai.operation.name", "chat")},
	}
}

func (ex *exerciser) send(ctx context.Context, spans ...map[string]any) error {
	body, err := json.Marshal(map[string]any{"resourceSpans": []any{map[string]any{
		"resource":   map[string]any{"attributes": []any{str("service.name", "dashtest-exerciser")}},
		"scopeSpans": []any{map[string]any{"scope": map[string]any{"name": "dashtest"}, "spans": spans}},
	}}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ex.otlp, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("exercise: POST %s: %w", ex.otlp, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("exercise: POST %s: %s %s", ex.otlp, resp.Status, b)
	}
	ex.sent += len(spans)
	for _, s := range spans {
		if strings.HasPrefix(s["name"].(string), "execute_tool") {
			ex.tools++
		}
	}
	return nil
}

// counter sums the samples of name whose labels include match.
func (ex *exerciser) counter(ctx context.Context, name string, match map[string]string) (float64, error) {
	samples, err := harness.Scrape(ctx, ex.tel)
	if err != nil {
		return 0, err
	}
	return samples.Total(name, match), nil
}

// waitFor waits until the sum of name's samples matching match is at least
// atLeast and, when atMost >= 0, at most atMost.
func (ex *exerciser) waitFor(ctx context.Context, what, name string, match map[string]string, atLeast, atMost float64) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := ex.counter(ctx, name, match)
		if err == nil && v >= atLeast && (atMost < 0 || v <= atMost) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("exercise: waited 15s for %s: %s%v is %v (want %v to %v), %v", what, name, match, v, atLeast, atMost, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
