package idemkit

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"
)

func TestIsCanonical(t *testing.T) {
	yes := []string{
		`{}`, `[]`, `0`, `-1`, `123456789012345`, `"a"`, `true`, `null`,
		`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
		`{"amount_cents":500,"order":"o-1"}`,
		`{"A":1,"b":2}`, `{"Ab":1,"ab_":2,"orderId":3}`, `{"a":{"A":1},"b":{"a":1}}`,
		`{"A":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1}`,
		`{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":1}`,
		`"\"\\\b\t\n\f\r\u0000\u001f"`, "\"é😂/<>&\x7f\"", "\"\u2028\"",
	}
	no := []string{
		``, ` {}`, `{} `, `{"b":1,"a":2}`, `{"a":1,"a":1}`, `{"a" :1}`, `1.0`, `1e2`, `-0`, `01`,
		`1234567890123456`, `"\/"`, `"\u0041"`, `"\u000A"`, `"\u000a"`, `"\u001F"`, "\"\x01\"", "\"\xff\"",
		`{"é":1}`, `{"a\n":1}`, `[1,]`, `{"a":1,}`, `tru`, `nul`, `"abc`, `[1 ,2]`,
		// Names that differ only in letter case (canonjson refuses them).
		`{"A":1,"a":2}`, `{"Order_Id":"o-2","amount_cents":1,"order_id":"o-1"}`, `{"x":[{"aB":1,"ab":2}]}`, `{"AB":1,"Ab":2}`,
		// More members than the fast path compares, one of them upper-case.
		`{"A":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":1}`,
	}
	for _, s := range yes {
		if !isCanonical([]byte(s)) {
			t.Errorf("isCanonical(%s) = false, want true", s)
		}
		c, err := jcs.Transform([]byte(s))
		if err != nil || !bytes.Equal(c, []byte(s)) {
			t.Errorf("the test's own canonical case %s is not canonical per JCS: %s %v", s, c, err)
		}
		if c, err := canonicalJSON([]byte(s)); err != nil || !bytes.Equal(c, []byte(s)) {
			t.Errorf("canonical case %s: CanonicalJSON gives %s %v", s, c, err)
		}
	}
	for _, s := range no {
		if isCanonical([]byte(s)) {
			t.Errorf("isCanonical(%q) = true, want false", s)
		}
	}
}

// Whenever the fast path says a document is canonical, the JCS library
// agrees byte for byte.
func FuzzIsCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null]}`, `"\u0001"`, `-12`, `{"a":{"b":"c"}}`, `[0,-0,1.5]`, `"\ud83d\ude02"`, `{"A":1,"a":2}`, `{"aB":{"Ab":1,"ab":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !isCanonical(doc) {
			return
		}
		c, err := jcs.Transform(doc)
		if err != nil || !bytes.Equal(c, doc) {
			t.Fatalf("isCanonical(%q) but JCS gives %q, %v", doc, c, err)
		}
		if c, err := canonicalJSON(doc); err != nil || !bytes.Equal(c, doc) {
			t.Fatalf("isCanonical(%q) but CanonicalJSON gives %q, %v", doc, c, err)
		}
	})
}

// FuzzCanonicalJSON checks the canonicaliser against the JCS library it
// replaces. Where both accept a document, they produce the same tokens in
// the same order, and every number they write differently is one whose
// exact value is not its double's shortest form, written by both as the
// same double: the documented deviation, nothing else. Where every number
// is a double's shortest form, the bytes are equal. The canonical form is
// a fixed point.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.50,1e3,-0.0],"a":{"y":"\u00e9\n","x":null}}`, `[9007199254740993, 1e-400, 333333333.33333329]`,
		`{"\ud83d\ude02":1,"\ufb33":2,"":3}`, `"\u0001\u001f\"\\/"`, `[true,false,null,{}]`, `1E+30`,
		`{"a":{"b":{"c":[1,{"d":0.000001}]}}}`, `[123456789012345678901234567890, 0.1e-6]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		ours, err := canonicalJSON(doc)
		if err != nil {
			// Refused here but accepted by JCS: only documents nested
			// deeper than canonjson.MaxDepth, numbers whose exponent is
			// beyond canonjson.MaxExponent (JCS reads 1e-1000000002 as 0),
			// and objects with member names that differ only in letter
			// case.
			if _, jerr := jcs.Transform(doc); jerr == nil && !strings.Contains(err.Error(), "nested deeper") &&
				!strings.Contains(err.Error(), "out of range") && !strings.Contains(err.Error(), "differ only in letter case") {
				t.Fatalf("%q: refused (%v), but JCS accepts it", doc, err)
			}
			return
		}
		again, err := canonicalJSON(ours)
		if err != nil || !bytes.Equal(again, ours) {
			t.Fatalf("not a fixed point: %q -> %q -> %q (%v)", doc, ours, again, err)
		}
		theirs, err := jcs.Transform(doc)
		if err != nil {
			return // JCS refuses numbers beyond doubles, which are exact here
		}
		if bytes.Equal(ours, theirs) {
			return
		}
		a, b := json.NewDecoder(bytes.NewReader(ours)), json.NewDecoder(bytes.NewReader(theirs))
		a.UseNumber()
		b.UseNumber()
		for {
			ta, errA := a.Token()
			tb, errB := b.Token()
			if errA != nil || errB != nil {
				if errA != errB {
					t.Fatalf("%q: ours %s, JCS %s: different structure", doc, ours, theirs)
				}
				return
			}
			na, okA := ta.(json.Number)
			nb, okB := tb.(json.Number)
			if okA && okB && na != nb {
				fa, _ := strconv.ParseFloat(string(na), 64)
				fb, _ := strconv.ParseFloat(string(nb), 64)
				if fa != fb {
					t.Fatalf("%q: ours writes %s, JCS %s: not the same double", doc, na, nb)
				}
				continue
			}
			if ta != tb {
				t.Fatalf("%q: ours %s, JCS %s: token %v vs %v", doc, ours, theirs, ta, tb)
			}
		}
	})
}
