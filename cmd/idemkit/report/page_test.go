package report

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

func testPage() *Page {
	start := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	ns := func(d time.Duration) int64 { return start.Add(d).UnixNano() }
	return &Page{
		Title:   "idemkit test",
		Lead:    "A lead with `code` and <b>markup</b>.",
		Verdict: Verdict{Text: "1 LEAKED"},
		Lanes:   []string{"billing", `<script>alert(1)</script>`},
		Attribution: []AttributionRow{
			{Lane: "billing", Service: "billing", Cause: sc.CauseTransportRetry, Effect: sc.EffectSuppressed, Got: 2},
			{Lane: `<script>alert(1)</script>`, Service: "x", Cause: sc.CauseHarnessRetry, Effect: sc.EffectLeaked, Got: 1},
			{Lane: "", Service: "elsewhere", Cause: sc.CauseUnknown, Effect: sc.EffectLeaked, Got: 5},
		},
		Duplicates: []Duplicate{
			{Lane: "billing", Cause: sc.CauseTransportRetry, Effect: sc.EffectSuppressed, Gap: 20 * time.Millisecond},
			{Lane: "billing", Cause: sc.CauseTransportRetry, Effect: sc.EffectSuppressed, Gap: 30 * time.Millisecond},
			{Lane: `<script>alert(1)</script>`, Cause: sc.CauseHarnessRetry, Effect: sc.EffectLeaked, Gap: 300 * time.Millisecond},
		},
		Timelines: []Timeline{{
			Name: "t1",
			Lanes: []TimelineLane{{Label: "billing", Start: start, End: start.Add(time.Second),
				Calls: []CallMark{{Tool: "refund", Label: "executed", Color: ColorExecuted, Start: ns(0), End: ns(100 * time.Millisecond)},
					{Tool: "refund", Label: "suppressed", Color: EffectColors[sc.EffectSuppressed], Start: ns(120 * time.Millisecond), End: ns(130 * time.Millisecond), Duplicate: true}},
				Chats: []Interval{{Start: ns(0), End: ns(50 * time.Millisecond)}}}},
			Table: Table{Header: []string{"service", "calls"}, Rows: []Row{{Key: "billing", Cells: []string{"billing", "2"}, Notes: []string{"n"}}}},
		}},
	}
}

func TestPage_Expect(t *testing.T) {
	got := testPage().Expect()
	want := Expect{
		Result:    "1 LEAKED",
		Bars:      map[string]int{"billing/transport_retry/suppressed": 2, "<script>alert(1)</script>/harness_retry/leaked": 1},
		Dots:      map[string]int{"gap/transport_retry": 2, "gap/harness_retry": 1},
		Timelines: 1,
		Calls:     map[string]int{"t1/billing": 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Expect:\n got %+v\nwant %+v", got, want)
	}
}

func TestPage_WriteHTML(t *testing.T) {
	var b bytes.Buffer
	if err := testPage().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{
		`id="result">1 LEAKED<`, `<code>code</code>`, `&lt;b&gt;markup&lt;/b&gt;`,
		`data-series="billing/transport_retry/suppressed" data-value="2"`,
		`data-series="&lt;script&gt;alert(1)&lt;/script&gt;/harness_retry/leaked" data-value="1"`,
		`class="dot" data-series="gap/transport_retry"`,
		`data-chart="timeline" data-scenario="t1"`,
		`class="call" data-run="t1/billing"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(html, `class="call"`); n != 2 {
		t.Errorf("%d call marks, want 2", n)
	}
	if n := strings.Count(html, `class="dot"`); n != 3 {
		t.Errorf("%d dots, want 3", n)
	}
	// A row of no lane is listed in the table, not drawn.
	if strings.Contains(html, `data-series="/unknown/leaked"`) || !strings.Contains(html, "<td>elsewhere</td>") {
		t.Errorf("the lane-less row is drawn, or missing from the table")
	}
	for _, banned := range []string{"<script>", `src="`, `href="`, "<link "} {
		if strings.Contains(html, banned) {
			t.Errorf("the page contains %q", banned)
		}
	}
}

// The gap chart names each lane's line in every cause's row, so that a dot
// says which server (or service) it is without hovering.
func TestPage_GapChartNamesEachLane(t *testing.T) {
	var b bytes.Buffer
	if err := testPage().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	start := strings.Index(html, `data-chart="gaps"`)
	if start < 0 {
		t.Fatal("no gap chart")
	}
	chart := html[start : start+strings.Index(html[start:], "</svg>")]
	rows := strings.Count(chart, `font-weight="600"`) // one cause name per row
	for _, lane := range []string{"billing", "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		label := `class="gap-lane" data-lane="` + lane + `"`
		if n := strings.Count(chart, label); rows == 0 || n != rows {
			t.Errorf("lane %s is named in %d of the %d rows", lane, n, rows)
		}
	}
}
