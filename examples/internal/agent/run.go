package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// ScopeName is the instrumentation scope of the agent's spans.
const ScopeName = "github.com/idemkit-mcp/idemkit/examples/internal/agent"

// Model is the gen_ai.request.model of the agent's chat spans. There is no
// model: the agent's decisions are scripted, and each chat span stands for
// the inference call in which the model would have made them.
const Model = "scripted-refund-agent"

// Defaults of Config.
const (
	DefaultReissueThink   = 2200 * time.Millisecond
	DefaultHarnessTimeout = 300 * time.Millisecond
	DefaultHarnessBackoff = 20 * time.Millisecond
	DefaultStatusWait     = time.Second
)

// Config configures Run.
type Config struct {
	// Targets are the servers to run every scenario against. Scenarios run
	// one after the other on each target; targets run side by side.
	Targets []Target
	// Token is the bearer token the agent sends.
	Token string
	// TracerProvider creates the agent's spans. Required.
	TracerProvider trace.TracerProvider
	// ReissueThink is how long the model "thinks" before re-issuing a call
	// (model_reissue); above the dup processor's harness_threshold (2s by
	// default) the gap alone would say model_reissue, the chat span says
	// it in any case. Defaults to DefaultReissueThink.
	ReissueThink time.Duration
	// HarnessTimeout is the harness's per-attempt timeout (harness_retry);
	// it must be below the slow gateway's latency. Defaults to
	// DefaultHarnessTimeout.
	HarnessTimeout time.Duration
	// HarnessBackoff is the harness's pause before its retry. Defaults to
	// DefaultHarnessBackoff.
	HarnessBackoff time.Duration
	// StatusWait is how long the agent waits before checking a refund whose
	// call failed or is in progress; above the slow gateway's latency.
	// Defaults to DefaultStatusWait.
	StatusWait time.Duration
	// Scenarios selects scenarios by name; empty runs them all.
	Scenarios []string
	// Out receives the narrative of each scenario run; nil discards it.
	Out io.Writer
}

func (c *Config) defaults() {
	if c.ReissueThink <= 0 {
		c.ReissueThink = DefaultReissueThink
	}
	if c.HarnessTimeout <= 0 {
		c.HarnessTimeout = DefaultHarnessTimeout
	}
	if c.HarnessBackoff <= 0 {
		c.HarnessBackoff = DefaultHarnessBackoff
	}
	if c.StatusWait <= 0 {
		c.StatusWait = DefaultStatusWait
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Run runs the scenarios against every target and returns what happened.
// It fails when a scenario could not be carried out (a server down, a
// refund refused); whether the duplicates were handled as expected is the
// report's business, not Run's.
func Run(ctx context.Context, cfg Config) (*Manifest, error) {
	cfg.defaults()
	if cfg.TracerProvider == nil || len(cfg.Targets) == 0 {
		return nil, errors.New("agent: Config needs a TracerProvider and Targets")
	}
	scenarios, err := selectScenarios(cfg.Scenarios)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Started: time.Now()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // protects m.Runs, errs and cfg.Out
		errs []error
	)
	for _, target := range cfg.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, s := range scenarios {
				r, err := runScenario(ctx, &cfg, target, s)
				mu.Lock()
				m.Runs = append(m.Runs, r)
				_, _ = cfg.Out.Write(r.narrative())
				if err != nil {
					errs = append(errs, fmt.Errorf("%s on the %s server: %w", s.Name, target.Name, err))
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	m.Ended = time.Now()
	m.sort(scenarios)
	return m, errors.Join(errs...)
}

// sort orders the runs by scenario, then target, for a stable manifest.
func (m *Manifest) sort(order []*Scenario) {
	rank := map[string]int{}
	for i, s := range order {
		rank[s.Name] = i
	}
	runs := m.Runs
	for i := 1; i < len(runs); i++ {
		for j := i; j > 0; j-- {
			a, b := runs[j-1], runs[j]
			if rank[a.Scenario] < rank[b.Scenario] || (rank[a.Scenario] == rank[b.Scenario] && a.Target.Name <= b.Target.Name) {
				break
			}
			runs[j-1], runs[j] = b, a
		}
	}
}

// session is one scenario running against one target: the agent's span,
// its current MCP connection and the record of what it did.
type session struct {
	cfg    *Config
	target Target
	tracer trace.Tracer
	proxy  *Proxy
	hc     *http.Client
	conn   *Conn
	rec    *ScenarioRun
}

func runScenario(ctx context.Context, cfg *Config, target Target, s *Scenario) (*ScenarioRun, error) {
	proxy := &Proxy{}
	se := &session{
		cfg:    cfg,
		target: target,
		tracer: cfg.TracerProvider.Tracer(ScopeName),
		proxy:  proxy,
		hc:     &http.Client{Transport: proxy},
		rec: &ScenarioRun{
			Scenario: s.Name, Layer: s.Layer, Title: s.Title, Target: target, OrderID: s.Order,
			Conversation: fmt.Sprintf("conv-%s-%s-%s", s.Name, target.Name, randomHex(4)),
			Started:      time.Now(),
		},
	}
	se.rec.Expect = s.Unprotected
	if target.Protected {
		se.rec.Expect = s.Protected
	}
	ctx, span := se.tracer.Start(ctx, "invoke_agent refund-desk-agent", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(sc.GenAIOperationName, "invoke_agent"),
			attribute.String("gen_ai.agent.name", "refund-desk-agent"),
			attribute.String(sc.GenAIConversationID, se.rec.Conversation),
			attribute.String("demo.scenario", s.Name),
			attribute.String("demo.target", target.Name),
		))
	se.rec.TraceID = span.SpanContext().TraceID().String()
	err := se.start(ctx)
	if err == nil {
		err = s.run(ctx, se)
	}
	if se.conn != nil {
		_ = se.conn.Close()
	}
	if err != nil {
		se.rec.Error = err.Error()
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	se.rec.Ended = time.Now()
	for _, ev := range proxy.Events() {
		if ev.Method == "tools/call" {
			se.rec.Wire = append(se.rec.Wire, ev)
		}
	}
	return se.rec, err
}

// start opens the first session and checks that the scenario's order is
// untouched: the expectations hold for fresh servers only.
func (se *session) start(ctx context.Context) error {
	if err := se.connect(ctx); err != nil {
		return err
	}
	res, err := se.call(ctx, "lookup_order", map[string]any{"order_id": se.rec.OrderID})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("lookup_order %s: %s", se.rec.OrderID, res.Text)
	}
	if refunded, _ := res.Structured["refunded_cents"].(float64); refunded != 0 {
		return fmt.Errorf("order %s already has refunds: run dupgen against fresh servers (a new -db and idemkit store), as scripts/demo.sh does", se.rec.OrderID)
	}
	return nil
}

// connect opens a new MCP session (the first one, or a reconnect).
func (se *session) connect(ctx context.Context) error {
	c, err := dial(ctx, se.target.URL, se.cfg.Token, se.hc, se.tracer)
	if err != nil {
		return err
	}
	if se.conn != nil {
		_ = se.conn.Close()
		se.step(Step{Kind: "reconnect", Session: c.SessionID(), Says: "new MCP session " + c.SessionID()})
	}
	se.conn = c
	return nil
}

// chat records an inference span: the model reading the conversation and
// deciding, for think, what to do next.
func (se *session) chat(ctx context.Context, think time.Duration, says string) {
	_, span := se.tracer.Start(ctx, "chat "+Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(sc.GenAIOperationName, sc.OperationChat),
			attribute.String("gen_ai.provider.name", "demo"),
			attribute.String("gen_ai.request.model", Model),
			attribute.String(sc.GenAIConversationID, se.rec.Conversation),
		))
	time.Sleep(think)
	span.End()
	se.step(Step{Kind: "chat", Says: says})
}

// call sends one tools/call on the current session and records it.
func (se *session) call(ctx context.Context, tool string, args map[string]any) (*Result, error) {
	st := Step{Kind: "call", Tool: tool, Args: maps.Clone(args), Session: se.conn.SessionID()}
	res, err := se.conn.call(ctx, tool, args)
	st.Result = res
	if err != nil {
		st.Error = err.Error()
	}
	se.step(st)
	return res, err
}

// note records what the harness or the MCP client layer did.
func (se *session) note(kind, says string) { se.step(Step{Kind: kind, Says: says}) }

func (se *session) step(st Step) {
	st.At = time.Now()
	se.rec.Steps = append(se.rec.Steps, st)
}

// narrative formats a run for the generator's log.
func (r *ScenarioRun) narrative() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n[%s] %s: %s\n  trace %s, order %s\n", r.Target.Name, r.Scenario, r.Title, r.TraceID, r.OrderID)
	wire := r.Wire
	for _, st := range r.Steps {
		switch st.Kind {
		case "chat":
			fmt.Fprintf(&b, "  model: %s\n", st.Says)
		case "call":
			args, _ := json.Marshal(st.Args)
			fmt.Fprintf(&b, "  → %s %s  (session %s)\n", st.Tool, args, shortID(st.Session))
			for len(wire) > 0 && !wire[0].At.After(st.At) {
				if st.Tool == "issue_refund" {
					fmt.Fprintf(&b, "      wire: %s\n", wire[0])
				}
				wire = wire[1:]
			}
			switch {
			case st.Error != "":
				fmt.Fprintf(&b, "  ← error: %s\n", st.Error)
			case st.Result != nil:
				mark := ""
				if st.Result.Replayed {
					mark = " [replayed by idemkit]"
				}
				if st.Result.IsError {
					mark += " [isError]"
				}
				fmt.Fprintf(&b, "  ← %s%s\n", oneLine(st.Result.Text, 160), mark)
			}
		default:
			fmt.Fprintf(&b, "  %s: %s\n", st.Kind, st.Says)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "  FAILED: %s\n", r.Error)
	}
	return b.Bytes()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
