package argpolicy

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/spancontract/canonjson"
)

func TestParsePointer_RFC6901(t *testing.T) {
	for p, want := range map[string]string{
		"/a":        "a",
		"/a/b":      "a|b",
		"/a~1b":     "a/b",
		"/m~0n":     "m~n",
		"/~01":      "~1", // ~0 first, then "1": not "/"
		"/":         "",
		"/items/0/": "items|0|",
		"/*":        "*",
	} {
		toks, err := ParsePointer(p)
		if err != nil {
			t.Errorf("ParsePointer(%q): %v", p, err)
			continue
		}
		if got := strings.Join(toks, "|"); got != want {
			t.Errorf("ParsePointer(%q) = %q, want %q", p, got, want)
		}
	}
	for _, p := range []string{"", "a/b", "/a~", "/a~2", "/~x", "/\xff", "/" + strings.Repeat("a/", MaxTokens)} {
		if _, err := ParsePointer(p); err == nil {
			t.Errorf("ParsePointer(%q) accepted an invalid pointer", p)
		}
	}
}

func TestCompile_RefusesBadPolicies(t *testing.T) {
	for name, c := range map[string]struct {
		exclude []string
		round   map[string]time.Duration
		want    string
	}{
		"bad escape":        {exclude: []string{"/a~2"}, want: "~"},
		"bad pointer round": {round: map[string]time.Duration{"/a~": time.Minute}, want: "~"},
		"zero granularity":  {round: map[string]time.Duration{"/t": 0}, want: "divide 24h"},
		"7 minutes":         {round: map[string]time.Duration{"/t": 7 * time.Minute}, want: "divide 24h"},
		"two days":          {round: map[string]time.Duration{"/t": 48 * time.Hour}, want: "divide 24h"},
		"excluded and rounded": {exclude: []string{"/t"}, round: map[string]time.Duration{"/t": time.Minute},
			want: "not both"},
		"plain and pointer disagree": {round: map[string]time.Duration{"t": time.Minute, "/t": time.Hour},
			want: "another granularity"},
		"wildcard overlaps index": {round: map[string]time.Duration{"/items/*/at": time.Minute, "/items/0/at": time.Hour},
			want: "same array element"},
	} {
		_, err := Compile(c.exclude, c.round)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Compile error = %v, want one containing %q", name, err, c.want)
		}
	}
}

func TestCompile_TopLevelOnlyIsSimple(t *testing.T) {
	p, err := Compile([]string{"nonce", "/request_id", "/a~1b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	names, ok := p.TopLevelNames()
	if !ok || strings.Join(names, ",") != "nonce,request_id,a/b" {
		t.Errorf("TopLevelNames = %q, %v; want nonce,request_id,a/b", names, ok)
	}
	for _, c := range [][]string{{"/order/at"}, {"/items/0"}} {
		p, _ := Compile(c, nil)
		if _, ok := p.TopLevelNames(); ok {
			t.Errorf("%q: a nested pointer reported as top-level", c)
		}
	}
	p, _ = Compile(nil, map[string]time.Duration{"at": time.Minute})
	if _, ok := p.TopLevelNames(); ok {
		t.Error("a rounding policy reported as top-level excludes")
	}
}

func apply(t *testing.T, p *Policy, doc string) (string, error) {
	t.Helper()
	canon, err := canonjson.Transform([]byte(doc))
	if err != nil {
		t.Fatalf("canonjson.Transform(%s): %v", doc, err)
	}
	out, err := p.Apply(nil, canon)
	if err == nil {
		// The output stays canonical.
		again, terr := canonjson.Transform(out)
		if terr != nil || string(again) != string(out) {
			t.Errorf("Apply(%s) = %s, not canonical (%v)", doc, out, terr)
		}
	}
	return string(out), err
}

func TestApply_Vectors(t *testing.T) {
	min := time.Minute
	for _, c := range []struct {
		exclude []string
		round   map[string]time.Duration
		doc     string
		want    string
	}{
		{[]string{"/order/requested_at"}, nil,
			`{"order":{"id":"o-1","requested_at":"x"},"requested_at":"kept"}`,
			`{"order":{"id":"o-1"},"requested_at":"kept"}`},
		{[]string{"/items/0/nonce"}, nil,
			`{"items":[{"nonce":1,"sku":"a"},{"nonce":2,"sku":"b"}]}`,
			`{"items":[{"sku":"a"},{"nonce":2,"sku":"b"}]}`},
		{[]string{"/items/*/nonce"}, nil,
			`{"items":[{"nonce":1,"sku":"a"},{"nonce":2,"sku":"b"}]}`,
			`{"items":[{"sku":"a"},{"sku":"b"}]}`},
		// "*" on an object is the member named "*" (RFC 6901).
		{[]string{"/m/*"}, nil, `{"m":{"*":1,"x":2}}`, `{"m":{"x":2}}`},
		// "0" on an object is the member named "0".
		{[]string{"/m/0"}, nil, `{"m":{"0":1,"1":2}}`, `{"m":{"1":2}}`},
		// Escapes: "a/b" and "m~n".
		{[]string{"/o/a~1b", "/o/m~0n"}, nil, `{"o":{"a/b":1,"m~n":2,"z":3}}`, `{"o":{"z":3}}`},
		// An excluded array element is left out.
		{[]string{"/tags/1"}, nil, `{"tags":["a","b","c"]}`, `{"tags":["a","c"]}`},
		// A pointer into a scalar, or a missing member, matches nothing.
		{[]string{"/a/b/c", "/missing"}, nil, `{"a":{"b":5}}`, `{"a":{"b":5}}`},
		// Names match byte for byte.
		{[]string{"/order/Requested_At"}, nil, `{"order":{"requested_at":1}}`, `{"order":{"requested_at":1}}`},
		// Names with escapes in the canonical form.
		{[]string{"/o/\u00e9"}, nil, `{"o":{"\u00e9":1,"e":2}}`, `{"o":{"e":2}}`},
		{[]string{"/o/a\"b\tc"}, nil, `{"o":{"a\"b\u0009c":1,"e":2}}`, `{"o":{"e":2}}`},
		// Rounding: UTC, truncated.
		{nil, map[string]time.Duration{"/requested_at": min},
			`{"requested_at":"2026-12-02T10:00:59.999Z"}`, `{"requested_at":"2026-12-02T10:00:00Z"}`},
		{nil, map[string]time.Duration{"/requested_at": min},
			`{"requested_at":"2026-12-02T11:00:30+01:00"}`, `{"requested_at":"2026-12-02T10:00:00Z"}`},
		{nil, map[string]time.Duration{"/requested_at": time.Hour},
			`{"requested_at":"2026-12-02T00:30:00-05:30"}`, `{"requested_at":"2026-12-02T06:00:00Z"}`},
		{nil, map[string]time.Duration{"/requested_at": min}, `{"requested_at":null}`, `{"requested_at":null}`},
		{nil, map[string]time.Duration{"/requested_at": min},
			`{"requested_at":"2026-12-02t10:00:30z"}`, `{"requested_at":"2026-12-02T10:00:00Z"}`},
		// Exclusion beats rounding where both reach a value.
		{[]string{"/items/0/at"}, map[string]time.Duration{"/items/*/at": min},
			`{"items":[{"at":"x"},{"at":"2026-12-02T10:00:30Z"}]}`, `{"items":[{},{"at":"2026-12-02T10:00:00Z"}]}`},
		{nil, map[string]time.Duration{"/requested_at": min}, `{"other":1}`, `{"other":1}`},
		{nil, map[string]time.Duration{"/items/*/at": 24 * time.Hour},
			`{"items":[{"at":"2026-12-02T23:59:59Z"},{"at":"2026-12-03T00:00:00Z"}]}`,
			`{"items":[{"at":"2026-12-02T00:00:00Z"},{"at":"2026-12-03T00:00:00Z"}]}`},
		// A plain name is top-level only.
		{[]string{"nonce"}, nil, `{"nonce":1,"o":{"nonce":2}}`, `{"o":{"nonce":2}}`},
	} {
		p, err := Compile(c.exclude, c.round)
		if err != nil {
			t.Fatalf("Compile(%q, %v): %v", c.exclude, c.round, err)
		}
		got, err := apply(t, p, c.doc)
		if err != nil {
			t.Errorf("Apply(%s) under %q %v: %v", c.doc, c.exclude, c.round, err)
		} else if got != c.want {
			t.Errorf("Apply(%s) under %q %v = %s, want %s", c.doc, c.exclude, c.round, got, c.want)
		}
	}
}

func TestApply_RefusesWhatIsNotATimestamp(t *testing.T) {
	p, err := Compile(nil, map[string]time.Duration{"/order/at": time.Minute, "/items/*/at": time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for doc, path := range map[string]string{
		`{"order":{"at":1764669600}}`:                           "/order/at",
		`{"order":{"at":"yesterday"}}`:                          "/order/at",
		`{"order":{"at":"2026-12-02 10:00:00Z"}}`:               "/order/at",
		`{"order":{"at":"2026-12-02"}}`:                         "/order/at",
		`{"order":{"at":{"t":"2026-12-02T10:00:00Z"}}}`:         "/order/at",
		`{"items":[{"at":"2026-12-02T10:00:00Z"},{"at":true}]}`: "/items/1/at",
	} {
		_, err := apply(t, p, doc)
		var te *TimestampError
		if !errors.As(err, &te) || te.Path != path || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("Apply(%s) error = %v, want a TimestampError at %s", doc, err, path)
		}
	}
}

// Cached compiles a policy once, and tells policies apart by content, not
// by the slice or map that holds them.
func TestCached_CompilesOncePerPolicy(t *testing.T) {
	// A policy no earlier run of this test (go test -count) has cached.
	unique := "/run/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	excl := []string{"/order/at", "/items/*/nonce", unique}
	round := map[string]time.Duration{"/sent_at": time.Minute}
	before := cacheMis.Load()
	p1, err := Cached(excl, round)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := Cached([]string{"/order/at", "/items/*/nonce", unique}, map[string]time.Duration{"/sent_at": time.Minute})
	if p1 != p2 || cacheMis.Load()-before != 1 {
		t.Errorf("the same policy compiled %d times", cacheMis.Load()-before)
	}
	excl[0] = "/order/other" // the caller changes its slice: another policy
	p3, _ := Cached(excl, round)
	if p3 == p1 {
		t.Error("a changed exclude list got the old policy")
	}
	round["/sent_at"] = time.Hour
	if p4, _ := Cached(excl, round); p4 == p3 {
		t.Error("a changed granularity got the old policy")
	}
	if _, err := Cached([]string{"/a~2"}, nil); err == nil {
		t.Error("a cached invalid policy lost its error")
	}
	if _, err := Cached([]string{"/a~2"}, nil); err == nil {
		t.Error("an invalid policy is valid the second time")
	}
}
