package idemkit

import (
	"bytes"
	"testing"

	"github.com/gowebpki/jcs"
)

func TestIsCanonical(t *testing.T) {
	yes := []string{
		`{}`, `[]`, `0`, `-1`, `123456789012345`, `"a"`, `true`, `null`,
		`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
		`{"amount_cents":500,"order":"o-1"}`,
		`"\"\\\b\t\n\f\r\u0000\u001f"`, "\"é😂/<>&\x7f\"", "\"\u2028\"",
	}
	no := []string{
		``, ` {}`, `{} `, `{"b":1,"a":2}`, `{"a":1,"a":1}`, `{"a" :1}`, `1.0`, `1e2`, `-0`, `01`,
		`1234567890123456`, `"\/"`, `"\u0041"`, `"\u000A"`, `"\u000a"`, `"\u001F"`, "\"\x01\"", "\"\xff\"",
		`{"é":1}`, `{"a\n":1}`, `[1,]`, `{"a":1,}`, `tru`, `nul`, `"abc`, `[1 ,2]`,
	}
	for _, s := range yes {
		if !isCanonical([]byte(s)) {
			t.Errorf("isCanonical(%s) = false, want true", s)
		}
		c, err := jcs.Transform([]byte(s))
		if err != nil || !bytes.Equal(c, []byte(s)) {
			t.Errorf("the test's own canonical case %s is not canonical per JCS: %s %v", s, c, err)
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
	for _, s := range []string{`{"a":1,"b":[true,null]}`, `"\u0001"`, `-12`, `{"a":{"b":"c"}}`, `[0,-0,1.5]`, `"\ud83d\ude02"`} {
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
	})
}
