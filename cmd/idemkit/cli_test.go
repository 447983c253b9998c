package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// runCLI runs the command line in-process and returns its exit status and
// output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun_Version(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != exitOK || strings.TrimSpace(out) != "idemkit "+idemkit.Version {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestRun_HelpOnEveryCommand(t *testing.T) {
	for _, cmd := range [][]string{{"--help"}, {"gateway", "--help"}, {"migrate", "--help"}, {"sweep", "--help"}, {"inspect", "--help"}, {"inflight", "--help"}, {"attribute", "--help"}, {"version", "--help"}} {
		code, out, errOut := runCLI(t, cmd...)
		if code != exitOK || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
	}
	_, out, _ := runCLI(t, "gateway", "--help")
	for _, flag := range []string{"--listen", "--upstream", "--stdio", "--store", "--subject-header", "--otlp-endpoint", "--window", "--lease", "--protect", "--bypass"} {
		if !strings.Contains(out, flag) {
			t.Errorf("gateway --help does not document %s", flag)
		}
	}
}

// The root help lists each command once (cobra's command list), not again
// in its description.
func TestRun_HelpListsEachCommandOnce(t *testing.T) {
	_, out, _ := runCLI(t, "--help")
	for _, name := range []string{"gateway", "migrate", "sweep", "inspect", "inflight", "attribute", "version"} {
		listed := regexp.MustCompile(`(?m)^\s+(idemkit\s+)?` + name + `\s`)
		if n := len(listed.FindAllString(out, -1)); n != 1 {
			t.Errorf("idemkit --help lists %s %d times, want once:\n%s", name, n, out)
		}
	}
}

func TestRun_UsageErrorsSayWhatToFix(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"gateway", "--store", "memory"}, "no upstream"},
		{[]string{"gateway", "--upstream", "http://127.0.0.1:1/mcp"}, "--store is required"},
		{[]string{"gateway", "--store", "memory", "--upstream", "http://x/mcp", "--", "node"}, "not both"},
		{[]string{"gateway", "--store", "memory", "--stdio", "--upstream", "http://x/mcp"}, "--stdio serves a stdio server's command"},
		{[]string{"gateway", "--store", "memory", "--stdio", "--listen", "127.0.0.1:0", "--", "node"}, "--stdio and --listen"},
		{[]string{"gateway", "--store", "memory", "--upstream", "ftp://x"}, "not an http:// or https:// URL"},
		{[]string{"gateway", "--store", "memory", "node", "server.js"}, "after --"},
		{[]string{"gateway", "--store", "memory", "--window", "0s", "--upstream", "http://x/mcp"}, "--window must be positive"},
		{[]string{"gateway", "--store", "memory", "--lease", "20m", "--upstream", "http://x/mcp"}, "--lease (20m0s) must not be longer than --window"},
		{[]string{"gateway", "--store", "memory", "--protect", "a", "--bypass", "a", "--upstream", "http://x/mcp"}, `"a" is given to both`},
		{[]string{"gateway", "--store", "memory", "--window", "ten", "--upstream", "http://x/mcp"}, "invalid argument"},
		{[]string{"gateway", "--store", "memory", "--log-level", "loud", "--upstream", "http://x/mcp"}, "--log-level must be"},
		{[]string{"gateway", "--store", "memory", "--", "no-such-program-idemkit"}, "cannot be run"},
		{[]string{"gateway", "--store", "memory", "--upstream", "http://x/mcp", "--otlp-endpoint", "ftp://c:1"}, "--otlp-endpoint"},
		{[]string{"gateway", "--store", "redis://x", "--upstream", "http://x/mcp"}, `unknown store "redis"`},
		{[]string{"gateway", "--store", "memory", "--sweep-interval", "0", "--upstream", "http://x/mcp"}, "a memory store is only emptied by sweeping"},
		{[]string{"gateway", "--store", "sqlite:x.db", "--sweep-interval", "-1s", "--upstream", "http://x/mcp"}, "--sweep-interval must not be negative"},
		{[]string{"gateway", "--store", "memory", "--max-message-bytes", "0", "--upstream", "http://x/mcp"}, "--max-message-bytes must be positive"},
		{[]string{"migrate"}, "--store is required"},
		{[]string{"migrate", "--store", "memory"}, "no schema to migrate"},
		{[]string{"migrate", "--store", "sqlite:"}, "needs a file path"},
		{[]string{"migrate", "--store", "postgres:"}, "needs a DSN"},
		{[]string{"migrate", "--store", "postgres://u:secret@h:notaport/db"}, "cannot be parsed"},
		{[]string{"sweep", "--store", "memory"}, "nothing to sweep"},
		{[]string{"sweep", "--store", "sqlite:x.db", "--batch", "0"}, "--batch must be positive"},
		{[]string{"attribute"}, "one FILE"},
		{[]string{"attribute", "--format", "xml", "f"}, "--format must be text or json"},
		{[]string{"version", "extra"}, "takes no arguments"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
		if strings.Contains(errOut, "secret") {
			t.Errorf("%v: the error repeats a password: %q", c.args, errOut)
		}
	}
}

func TestParseStoreURL(t *testing.T) {
	for in, want := range map[string]storeURL{
		"memory":                         {kind: kindMemory},
		"sqlite:/var/lib/i.db":           {kind: kindSQLite, target: "/var/lib/i.db"},
		"sqlite://rel/i.db":              {kind: kindSQLite, target: "rel/i.db"},
		"postgres://u@h:5432/d":          {kind: kindPostgres, target: "postgres://u@h:5432/d"},
		"postgresql://u@h/d":             {kind: kindPostgres, target: "postgresql://u@h/d"},
		"postgres:host=h dbname=d":       {kind: kindPostgres, target: "host=h dbname=d"},
		"postgres:postgres://u@h:5432/d": {kind: kindPostgres, target: "postgres://u@h:5432/d"},
	} {
		got, err := parseStoreURL(in)
		if err != nil || got != want {
			t.Errorf("parseStoreURL(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	u, _ := parseStoreURL("postgres://idemkit:hunter2@db.internal:5433/idem")
	if s := u.String(); strings.Contains(s, "hunter2") || s != "postgres://idemkit@db.internal:5433/idem" {
		t.Errorf("String() = %q: it must name the database without the password", s)
	}
}

// expiredRecord writes a completed record whose window ended an hour ago.
func expiredRecord(t *testing.T, st idemstore.Store, tool string) {
	t.Helper()
	ctx := context.Background()
	past := time.Now().Add(-2 * time.Hour)
	key, err := idemkit.NewKey("s", tool, []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, idemstore.ClaimRequest{Key: key.ID(), Tool: tool, Token: 7, Lease: time.Minute, Window: time.Hour, Now: past}); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, idemstore.FinishRequest{Key: key.ID(), Token: 7, Succeeded: true, Response: idemkit.Response{Body: []byte(`{}`)}, Now: past}); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateAndSweep_SQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemkit.db")
	code, out, errOut := runCLI(t, "sweep", "--store", "sqlite:"+path)
	if code != exitFailure || !strings.Contains(errOut, "run `idemkit migrate") {
		t.Errorf("sweep before migrate: %d %q %q", code, out, errOut)
	}
	ms, err := sqlitestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	latest := ms[len(ms)-1].Version
	code, out, errOut = runCLI(t, "migrate", "--store", "sqlite:"+path)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("migrated from version 0 to %d\n", latest)) {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "migrate", "--store", "sqlite:"+path)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("at version %d, up to date", latest)) {
		t.Errorf("migrate again: %d %q", code, out)
	}

	st, err := sqlitestore.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	expiredRecord(t, st, "a")
	expiredRecord(t, st, "b")
	st.Close()
	code, out, errOut = runCLI(t, "sweep", "--store", "sqlite:"+path, "--batch", "1")
	if code != exitOK || !strings.Contains(out, "deleted 2 expired records") {
		t.Errorf("sweep: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "sweep", "--store", "sqlite:"+path)
	if code != exitOK || !strings.Contains(out, "deleted 0 expired records") {
		t.Errorf("sweep again: %d %q", code, out)
	}
}

func TestMigrateAndSweep_Postgres(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	dsn := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	store := dsn + sep + "search_path=" + schema

	code, _, errOut := runCLI(t, "sweep", "--store", store)
	if code != exitFailure || !strings.Contains(errOut, "run `idemkit migrate") {
		t.Errorf("sweep before migrate: %d %q", code, errOut)
	}
	ms, err := pgstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "migrate", "--store", store)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("migrated from version 0 to %d\n", ms[len(ms)-1].Version)) {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "migrate", "--store", "postgres:"+store)
	if code != exitOK || !strings.Contains(out, "up to date") {
		t.Errorf("migrate again: %d %q", code, out)
	}
	st, err := openStore(context.Background(), store, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expiredRecord(t, st.Store, "a")
	st.Close()
	code, out, errOut = runCLI(t, "sweep", "--store", store)
	if code != exitOK || !strings.Contains(out, "deleted 1 expired records") {
		t.Errorf("sweep: %d %q %q", code, out, errOut)
	}

	code, _, errOut = runCLI(t, "migrate", "--store", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	if code != exitFailure || !strings.Contains(errOut, "connect to the Postgres store") {
		t.Errorf("an unreachable database: %d %q", code, errOut)
	}
}

// TestAttribute_ReadsTheFileExporterFormat runs the command on spans in the
// Collector file exporter's format: a first call, its transport retry
// (replayed) and its harness retry (executed again: leaked).
func TestAttribute_ReadsTheFileExporterFormat(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billing")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	base := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	tool := func(id byte, req string, at time.Duration, outcome string) {
		s := spans.AppendEmpty()
		s.SetName("tools/call issue_refund")
		s.SetKind(ptrace.SpanKindServer)
		s.SetTraceID([16]byte{1, 2, 3})
		s.SetSpanID([8]byte{id})
		s.SetStartTimestamp(pcommonTime(base.Add(at)))
		s.SetEndTimestamp(pcommonTime(base.Add(at + 100*time.Millisecond)))
		a := s.Attributes()
		a.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		a.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
		a.PutStr(sc.GenAIToolName, "issue_refund")
		a.PutStr(sc.KeyHash, "945d2a5bcc3feaa8a0c4c1f7dfbaa5ac")
		a.PutStr(sc.KeySource, sc.KeySourceDerived)
		a.PutStr(sc.MCPSessionID, "session-1")
		a.PutStr(sc.JSONRPCRequestID, req)
		a.PutStr(sc.Outcome, outcome)
	}
	tool(1, "7", 0, sc.OutcomeExecuted)
	tool(2, "7", 200*time.Millisecond, sc.OutcomeReplayed)
	tool(3, "8", 600*time.Millisecond, sc.OutcomeExecuted)
	var m ptrace.JSONMarshaler
	b, err := m.MarshalTraces(td)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	annotated := filepath.Join(t.TempDir(), "annotated.jsonl")
	page := filepath.Join(t.TempDir(), "report.html")
	code, out, errOut := runCLI(t, "attribute", "--format", "json", "--spans-out", annotated, "--html", page, file)
	if code != exitOK {
		t.Fatalf("attribute: %d %q", code, errOut)
	}
	var doc attributionJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if doc.Spans != 3 || doc.ToolSpans != 3 || len(doc.Duplicates) != 2 {
		t.Fatalf("attribute: %+v", doc)
	}
	if d := doc.Duplicates[0]; d.Cause != sc.CauseTransportRetry || d.Effect != sc.EffectSuppressed || d.GapMS != 200 {
		t.Errorf("the replayed retry: %+v", d)
	}
	if d := doc.Duplicates[1]; d.Cause != sc.CauseHarnessRetry || d.Effect != sc.EffectLeaked || d.GapMS != 600 {
		t.Errorf("the executed retry: %+v", d)
	}
	if b, err := os.ReadFile(annotated); err != nil || !bytes.Contains(b, []byte(sc.DuplicateCause)) {
		t.Errorf("--spans-out: %v, %d bytes without annotations", err, len(b))
	}
	// The HTML page: a bar per (service, cause, effect), a dot per
	// duplicate, the trace call by call. (examples/internal/report checks
	// such a page in a browser.)
	b, err = os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{
		`id="result">1 LEAKED<`,
		`data-series="billing/transport_retry/suppressed" data-value="1"`,
		`data-series="billing/harness_retry/leaked" data-value="1"`,
		`data-series="gap/transport_retry" data-lane="billing" data-ms="200"`,
		`data-series="gap/harness_retry" data-lane="billing" data-ms="600"`,
		`data-scenario="01020300000000000000000000000000"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the HTML report lacks %s", want)
		}
	}
	if n := strings.Count(html, `class="call" data-run="01020300000000000000000000000000/billing"`); n != 3 {
		t.Errorf("the trace's timeline draws %d calls, want 3", n)
	}
	for _, banned := range []string{`src="`, `href="`, "<script", "<link "} {
		if strings.Contains(html, banned) {
			t.Errorf("the page is not self-contained: it contains %q", banned)
		}
	}
	code, out, _ = runCLI(t, "attribute", file)
	if code != exitOK || !strings.Contains(out, "Leaked duplicates:") || !strings.Contains(out, "harness_retry") {
		t.Errorf("attribute (text): %d\n%s", code, out)
	}
	code, _, errOut = runCLI(t, "attribute", filepath.Join(t.TempDir(), "missing.jsonl"))
	if code != exitFailure || !strings.Contains(errOut, "open the span file") {
		t.Errorf("a missing file: %d %q", code, errOut)
	}
}

func pcommonTime(t time.Time) pcommon.Timestamp { return pcommon.NewTimestampFromTime(t) }

// inspect --help and README.md name the states with the words inspect
// prints: the store's state (in_progress, completed, released) and what an
// in_progress record is now (running, abandoned), or any record past its
// window (expired).
func TestInspect_HelpAndREADMENameTheStatesItPrints(t *testing.T) {
	_, help, _ := runCLI(t, "inspect", "--help")
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{"in_progress", "running", "abandoned", "completed", "released", "expired"} {
		if !strings.Contains(help, state) {
			t.Errorf("inspect --help does not name the state %q", state)
		}
		if !strings.Contains(string(readme), state) {
			t.Errorf("cmd/idemkit/README.md does not name the state %q", state)
		}
	}
}
