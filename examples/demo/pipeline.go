package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/examples/internal/report"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// Topology names a Collector deployment the demo can run through.
type Topology string

// The deployments.
const (
	// TopologyDemo is examples/demo/collector.yaml: one Collector with a
	// file exporter of the annotated spans.
	TopologyDemo Topology = "demo"
	// TopologySingle is collector/examples/single/config.yaml as shipped.
	TopologySingle Topology = "single"
	// TopologyTwoTier is collector/examples/two-tier as shipped: tier 1
	// routing to two tier-2 Collectors.
	TopologyTwoTier Topology = "two-tier"
)

// Topologies are every deployment, the demo's first.
var Topologies = []Topology{TopologyDemo, TopologySingle, TopologyTwoTier}

// ParseTopology checks a topology name.
func ParseTopology(s string) (Topology, error) {
	for _, t := range Topologies {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown Collector topology %q: use demo, single or two-tier", s)
}

// Options configures a Pipeline.
type Options struct {
	// Root is the repository root. Defaults to harness.RepoRoot().
	Root string
	// Dir is the work directory: logs, databases, manifest, spans, reports
	// (created when missing; earlier outputs are removed). Required.
	Dir string
	// Collector is the otelcol-idemkit binary. Defaults to
	// harness.CollectorBinary (scripts/collector-build.sh).
	Collector string
	// Topology is the Collector deployment. Defaults to TopologyDemo.
	Topology Topology
	// DecisionWait is the dup processor's decision_wait (set through
	// DUP_DECISION_WAIT). Defaults to 2s, so that the report comes quickly;
	// every process of the demo exports within 500ms of a span's end.
	DecisionWait time.Duration
	// Out receives the narrative. Defaults to os.Stdout.
	Out io.Writer
	// Started is when the command running the demo started, its own
	// compilation included (scripts/demo.sh passes it to
	// examples/demo/cmd/demo as IDEMKIT_DEMO_STARTED): the closing line of
	// Run counts from it. Defaults to when Run starts.
	Started time.Time
	// NoGateway leaves out the third target, idemkit gateway in front of
	// an unprotected refund server, for checks written for one protected
	// server (the dashboards' live test). Defaults to running it.
	NoGateway bool
}

// CollectorProc is one Collector of the deployment and its endpoints.
type CollectorProc struct {
	// Name is demo, single, tier1, tier2-a or tier2-b.
	Name string
	// OTLP is its OTLP/gRPC address; Exporter its Prometheus exporter's
	// and Telemetry its own metrics' (host:port; Exporter may be "").
	OTLP, Exporter, Telemetry string
	// SpansFile is where it writes the annotated spans ("" when it runs no
	// dup processor).
	SpansFile string
	// Config are its configuration files.
	Config []string
	env    []string
	Proc   *harness.Proc
}

// Pipeline is one run of the demo: the Collectors, the refund servers (one
// protected by idemkit, one without it, and one more without it behind
// idemkit gateway) and the agent, with every address chosen before
// anything starts.
type Pipeline struct {
	Opts Options
	// Collectors are the deployment's Collectors; the first receives the
	// servers' and the agent's OTLP.
	Collectors []*CollectorProc
	// Targets are the refund servers: protected, unprotected, and the
	// gateway in front of an unprotected one.
	Targets []agent.Target
	// Manifest is dupgen's record of the run, once RunAgent returned.
	Manifest *agent.Manifest

	g       *harness.Group
	bin     string // where the demo programs are built
	servers []*harness.Proc
}

// Paths in the work directory.
const (
	ManifestFile = "manifest.json"
	TextReport   = "report.txt"
	HTMLReport   = "report.html"
	// InputsFile holds the report's inputs (report.Inputs as JSON).
	InputsFile = "inputs.json"
)

// DBPath returns the refund database of a target (by name).
func (p *Pipeline) DBPath(target string) string {
	return filepath.Join(p.Opts.Dir, target, "refunds.db")
}

// Entry is the OTLP/gRPC address the servers and the agent export to.
func (p *Pipeline) Entry() string { return p.Collectors[0].OTLP }

// collect returns f of each Collector, leaving out "".
func (p *Pipeline) collect(f func(*CollectorProc) string) []string {
	var out []string
	for _, c := range p.Collectors {
		if v := f(c); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Exporters are the host:port of every Prometheus exporter.
func (p *Pipeline) Exporters() []string {
	return p.collect(func(c *CollectorProc) string { return c.Exporter })
}

// Telemetry are the host:port of every Collector's own metrics.
func (p *Pipeline) Telemetry() []string {
	return p.collect(func(c *CollectorProc) string { return c.Telemetry })
}

// ProcessorTelemetry are the host:port of the own metrics of the
// Collectors that run the dup processor.
func (p *Pipeline) ProcessorTelemetry() []string {
	return p.collect(func(c *CollectorProc) string {
		if c.SpansFile == "" {
			return ""
		}
		return c.Telemetry
	})
}

// SpansFiles are the files of annotated spans, one per dup processor.
func (p *Pipeline) SpansFiles() []string {
	return p.collect(func(c *CollectorProc) string { return c.SpansFile })
}

// New plans a run: it picks every port and writes the Collectors'
// configuration overlays; nothing is started.
func New(ctx context.Context, o Options) (*Pipeline, error) {
	if o.Dir == "" {
		return nil, errors.New("demo: Options.Dir is required")
	}
	if o.Root == "" {
		root, err := harness.RepoRoot()
		if err != nil {
			return nil, err
		}
		o.Root = root
	}
	if o.Topology == "" {
		o.Topology = TopologyDemo
	}
	if _, err := ParseTopology(string(o.Topology)); err != nil {
		return nil, err
	}
	if o.DecisionWait <= 0 {
		o.DecisionWait = 2 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	// A reused work directory: start from fresh databases and outputs.
	for _, name := range []string{"protected", "unprotected", "gateway", "logs", "collector"} {
		if err := os.RemoveAll(filepath.Join(o.Dir, name)); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{ManifestFile, TextReport, HTMLReport, InputsFile, "report.png"} {
		_ = os.Remove(filepath.Join(o.Dir, name))
	}
	for _, d := range []string{"protected", "unprotected", "gateway", "logs", "collector"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	p := &Pipeline{Opts: o, g: &harness.Group{Dir: filepath.Join(o.Dir, "logs")}, bin: filepath.Join(o.Dir, "bin")}
	if err := p.plan(); err != nil {
		return nil, err
	}
	p.Targets = []agent.Target{
		{Name: "protected", Service: "refundserver", Protected: true},
		{Name: "unprotected", Service: "refundserver-unprotected"},
	}
	if !o.NoGateway {
		p.Targets = append(p.Targets, agent.Target{Name: "gateway", Service: "refundserver-gateway", Protected: true, Gateway: true})
	}
	return p, nil
}

// plan chooses the Collectors' addresses and configuration files.
func (p *Pipeline) plan() error {
	o := p.Opts
	var portErr error
	addr := func() string {
		a, err := harness.FreeAddr()
		portErr = errors.Join(portErr, err)
		return a
	}
	port := func(a string) string { return a[strings.LastIndexByte(a, ':')+1:] }
	newCollector := func(name string, dup bool, config ...string) *CollectorProc {
		c := &CollectorProc{Name: name, OTLP: addr(), Exporter: addr(), Telemetry: addr(), Config: config}
		c.env = []string{"OTLP_GRPC_ENDPOINT=" + c.OTLP, "PROMETHEUS_ENDPOINT=" + c.Exporter, "TELEMETRY_PORT=" + port(c.Telemetry)}
		if dup {
			c.SpansFile = filepath.Join(o.Dir, "collector", name+"-spans.jsonl")
			c.env = append(c.env, "DUP_DECISION_WAIT="+o.DecisionWait.String(), "DUP_FLUSH_INTERVAL=1s")
		}
		return c
	}
	overlay := func(c *CollectorProc, shipped string) error {
		b, err := harness.TraceFileOverlay(shipped, "dup", "file/demo_evidence", c.SpansFile)
		if err != nil {
			return err
		}
		path := filepath.Join(o.Dir, "collector", c.Name+"-evidence.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		c.Config = append(c.Config, path)
		return nil
	}
	examples := filepath.Join(o.Root, "collector", "examples")
	switch o.Topology {
	case TopologyDemo:
		c := newCollector("demo", true, filepath.Join(o.Root, "examples", "demo", "collector.yaml"))
		c.env = append(c.env, "SPANS_FILE="+c.SpansFile)
		p.Collectors = []*CollectorProc{c}
	case TopologySingle:
		c := newCollector("single", true, filepath.Join(examples, "single", "config.yaml"))
		if err := overlay(c, c.Config[0]); err != nil {
			return err
		}
		p.Collectors = []*CollectorProc{c}
	case TopologyTwoTier:
		tier1 := newCollector("tier1", false, filepath.Join(examples, "two-tier", "tier1.yaml"))
		p.Collectors = []*CollectorProc{tier1}
		for _, name := range []string{"tier2-a", "tier2-b"} {
			c := newCollector(name, true, filepath.Join(examples, "two-tier", "tier2.yaml"))
			if err := overlay(c, c.Config[0]); err != nil {
				return err
			}
			p.Collectors = append(p.Collectors, c)
		}
		tier1.env = append(tier1.env, "TIER2_A="+p.Collectors[1].OTLP, "TIER2_B="+p.Collectors[2].OTLP)
	}
	return portErr
}

func (p *Pipeline) say(format string, args ...any) { fmt.Fprintf(p.Opts.Out, format+"\n", args...) }

// Step prints a step heading.
func (p *Pipeline) Step(format string, args ...any) {
	p.say("\n==> "+format, args...)
}

// Build builds the Collector (unless Options.Collector is set) and the demo
// programs.
func (p *Pipeline) Build(ctx context.Context) error {
	if p.Opts.Collector == "" {
		p.Step("Building the Collector distribution (scripts/collector-build.sh; ~6 min on a fresh machine, seconds when cached)")
		bin, err := harness.CollectorBinary(ctx, p.Opts.Root, os.Stderr)
		if err != nil {
			return err
		}
		p.Opts.Collector = bin
		p.say("    %s", bin)
	}
	p.Step("Building the demo programs (examples/refundserver, examples/dupgen, cmd/idemkit)")
	return harness.Run(ctx, os.Stderr, p.Opts.Root, "go", "build", "-o", p.bin+string(filepath.Separator), "./examples/refundserver", "./examples/dupgen", "./cmd/idemkit")
}

// StartCollectors starts the deployment, the last Collector first (tier 2
// before the tier that routes to it), and waits until each listens.
func (p *Pipeline) StartCollectors(ctx context.Context) error {
	p.Step("Starting the Collector (%s: %s)", p.Opts.Topology, p.configNames())
	for i := len(p.Collectors) - 1; i >= 0; i-- {
		c := p.Collectors[i]
		args := []string{p.Opts.Collector}
		for _, f := range c.Config {
			args = append(args, "--config", f)
		}
		proc, err := p.g.Start("collector-"+c.Name, c.env, args...)
		if err != nil {
			return err
		}
		c.Proc = proc
		for _, a := range []string{c.OTLP, c.Exporter, c.Telemetry} {
			if err := proc.WaitReady(ctx, "a listener on "+a, 60*time.Second, harness.Listening(a)); err != nil {
				return err
			}
		}
		p.say("    %-8s OTLP/gRPC %s, Prometheus exporter http://%s/metrics, own metrics http://%s/metrics", c.Name, c.OTLP, c.Exporter, c.Telemetry)
	}
	return nil
}

func (p *Pipeline) configNames() string {
	var names []string
	for _, c := range p.Collectors {
		rel, err := filepath.Rel(p.Opts.Root, c.Config[0])
		if err != nil {
			rel = c.Config[0]
		}
		names = append(names, rel)
	}
	return strings.Join(names, ", ")
}

// StartServers starts the protected and the unprotected refund server,
// and idemkit gateway in front of a third, unprotected one, on free ports
// with fresh databases.
func (p *Pipeline) StartServers(ctx context.Context) error {
	p.Step("Starting the refund servers (fresh databases) and idemkit gateway")
	for i, t := range p.Targets {
		bin := filepath.Join(p.bin, "refundserver")
		args := []string{"-addr", "127.0.0.1:0", "-db", p.DBPath(t.Name)}
		switch {
		case t.Gateway:
			// The server behind the gateway exports nothing: the
			// gateway's spans and metrics are the target's.
			upstream, err := p.startServer(ctx, t.Name+"-upstream", filepath.Join(p.Opts.Dir, t.Name, "upstream-url"), bin,
				append(args, "-unprotected", "-otlp-endpoint", "", "-service-name", t.Service+"-upstream")...)
			if err != nil {
				return err
			}
			bin = filepath.Join(p.bin, "idemkit")
			args = []string{"gateway", "--listen", "127.0.0.1:0", "--upstream", upstream,
				"--store", "sqlite:" + filepath.Join(p.Opts.Dir, t.Name, "idemkit.db"),
				"--otlp-endpoint", p.Entry(), "--service-name", t.Service}
		case t.Protected:
			args = append(args, "-otlp-endpoint", p.Entry(), "-service-name", t.Service,
				"-store", "sqlite", "-store-db", filepath.Join(p.Opts.Dir, t.Name, "idemkit.db"))
		default:
			args = append(args, "-otlp-endpoint", p.Entry(), "-service-name", t.Service, "-unprotected")
		}
		url, err := p.startServer(ctx, t.Name, filepath.Join(p.Opts.Dir, t.Name, "url"), bin, args...)
		if err != nil {
			return err
		}
		p.Targets[i].URL = url
	}
	for _, t := range p.Targets {
		p.say("    %-12s %-58s %s", t.Name, "("+t.Describe()+")", t.URL)
	}
	return nil
}

// startServer starts a server that writes its URL to ready once it
// listens (-ready-file for refundserver, --ready-file for idemkit), and
// returns the URL.
func (p *Pipeline) startServer(ctx context.Context, name, ready, bin string, args ...string) (string, error) {
	_ = os.Remove(ready)
	flag := "-ready-file"
	if filepath.Base(bin) == "idemkit" {
		flag = "--ready-file"
	}
	proc, err := p.g.Start(name, nil, append(append([]string{bin}, args...), flag, ready)...)
	if err != nil {
		return "", err
	}
	p.servers = append(p.servers, proc)
	if err := proc.WaitReady(ctx, "its ready file", 30*time.Second, harness.FileNotEmpty(ready)); err != nil {
		return "", err
	}
	url, err := os.ReadFile(ready)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(url)), nil
}

// RunAgent runs dupgen against every target and reads its manifest.
func (p *Pipeline) RunAgent(ctx context.Context) error {
	p.Step("Running the duplicate generator (an agent whose tool calls are duplicated by each layer)")
	manifest := filepath.Join(p.Opts.Dir, ManifestFile)
	log, err := os.Create(filepath.Join(p.Opts.Dir, "logs", "dupgen.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{filepath.Join(p.bin, "dupgen"), "-otlp-endpoint", p.Entry(), "-manifest", manifest}
	for _, t := range p.Targets {
		args = append(args, "-"+t.Name, t.URL, "-"+t.Name+"-service", t.Service)
	}
	err = harness.Run(ctx, io.MultiWriter(p.Opts.Out, log), p.Opts.Dir, args...)
	if err != nil {
		return fmt.Errorf("dupgen failed (see logs/dupgen.log and the server logs): %w", err)
	}
	p.Manifest, err = agent.ReadManifest(manifest)
	return err
}

// StopServers stops the refund servers gracefully: in-flight calls finish,
// their telemetry is flushed.
func (p *Pipeline) StopServers() error {
	p.Step("Stopping the servers (graceful: in-flight calls finish, telemetry is flushed)")
	var errs []error
	// The last started first: the gateway before the server behind it.
	for i := len(p.servers) - 1; i >= 0; i-- {
		errs = append(errs, p.servers[i].Stop(15*time.Second))
	}
	p.servers = nil
	return errors.Join(errs...)
}

// Inputs waits until the Collectors decided on every tool call of the
// manifest (or wait passes), then reads the report's inputs: their metrics
// and telemetry, the annotated spans and the servers' databases.
func (p *Pipeline) Inputs(ctx context.Context, wait time.Duration) (report.Inputs, error) {
	in := report.Inputs{Manifest: p.Manifest, HarnessThreshold: 2 * time.Second, Refunds: map[string][]refunds.Refund{}}
	start := time.Now()
	for {
		var err error
		in.Metrics, err = p.scrape(ctx, p.Exporters())
		if err == nil {
			in.Spans, err = report.ReadSpans(p.SpansFiles()...)
		}
		var pending []string
		if err == nil {
			if pending = report.Pending(p.Manifest, in.Metrics, in.Spans); len(pending) == 0 {
				break
			}
		}
		if time.Since(start) > wait {
			if err != nil {
				return in, fmt.Errorf("after %s: %w", wait, err)
			}
			p.say("gave up waiting after %s: %s", wait, strings.Join(pending, "; "))
			break
		}
		select {
		case <-ctx.Done():
			return in, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	p.say("Collector decisions complete %.1fs after dupgen ended.", time.Since(p.Manifest.Ended).Seconds())
	var err error
	if in.Telemetry, err = p.scrape(ctx, p.Telemetry()); err != nil {
		return in, fmt.Errorf("the Collectors' telemetry: %w", err)
	}
	for _, t := range p.Targets {
		db, err := refunds.OpenDB(ctx, p.DBPath(t.Name))
		if err != nil {
			return in, err
		}
		in.Refunds[t.Name], err = db.Refunds(ctx, "")
		db.Close()
		if err != nil {
			return in, fmt.Errorf("%s: %w", p.DBPath(t.Name), err)
		}
	}
	return in, nil
}

func (p *Pipeline) scrape(ctx context.Context, addrs []string) (harness.Samples, error) {
	var all harness.Samples
	for _, a := range addrs {
		s, err := harness.Scrape(ctx, "http://"+a+"/metrics")
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return all, nil
}

// Close stops every process still running.
func (p *Pipeline) Close() error { return p.g.StopAll(15 * time.Second) }
