package canonjson_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/spancontract/canonjson"
)

func TestTransform(t *testing.T) {
	for in, want := range map[string]string{
		`{"b": [1, 1.0, 1e0, 10e-1, 100, 1e2], "a": {"y": "\u00e9\n", "x": null}}`: `{"a":{"x":null,"y":"é\n"},"b":[1,1,1,1,100,100]}`,
		`[9007199254740993, 9007199254740992, 0.1e-6, 1E+30]`:                      `[9007199254740993,9007199254740992,1e-7,1e+30]`,
		`{"\ud83d\ude02":1,"\ufb33":2,"":3}`:                                       `{"":3,"😂":1,"דּ":2}`,
		`"\u0001\u001f\"\\/"`:                                                      `"\u0001\u001f\"\\/"`,
	} {
		got, err := canonjson.Transform([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("Transform(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `[1,]`, "\"\xff\"", `"\ud800"`, `[1e1000000001]`, `NaN`, `{"a":1}x`} {
		if got, err := canonjson.Transform([]byte(bad)); err == nil {
			t.Errorf("Transform(%q) = %s, want an error", bad, got)
		} else if errors.Is(err, canonjson.ErrCaseVariantNames) {
			t.Errorf("Transform(%q): %v matches ErrCaseVariantNames", bad, err)
		}
	}
}

// Two member names of one object equal under case folding, at any depth,
// are refused; the same names in different objects are not.
func TestTransform_CaseVariantNames(t *testing.T) {
	var big strings.Builder
	big.WriteString("{")
	for i := range 40 {
		fmt.Fprintf(&big, `"m%02d":%d,`, i, i)
	}
	big.WriteString(`"M07":0}`)
	refused := []string{
		`{"order_id":"ord_1012","Order_Id":"ord_1013","amount_cents":250}`,
		`{"amount_cents":20,"AMOUNT_CENTS":70}`,
		`{"a":[1,{"x":{"k":1,"K":2}}]}`,
		`{"k":1,"\u212a":2}`,         // KELVIN SIGN folds to k
		"{\"sku\":1,\"\u017fku\":2}", // LATIN SMALL LETTER LONG S folds to s
		`{"order\u005fid":1,"ORDER_ID":2}`,
		`{"Ab":1,"aB":2}`,
		`{"é":1,"É":2}`,
		big.String(),
	}
	for _, doc := range refused {
		_, err := canonjson.Transform([]byte(doc))
		if !errors.Is(err, canonjson.ErrCaseVariantNames) {
			t.Errorf("Transform(%.60s): %v, want ErrCaseVariantNames", doc, err)
			continue
		}
		if !strings.Contains(err.Error(), "differ only in letter case") {
			t.Errorf("error text %q", err)
		}
	}
	accepted := []string{
		`{"a":{"A":1},"b":{"a":2}}`, `[{"a":1},{"A":2}]`, `{"ß":1,"ss":2}`, `{"İ":1,"i":2}`, `{"ab":1,"abc":2,"ABCD":3}`,
		`{"a_b":1,"a-b":2}`, `{"":1,"A":2}`,
	}
	for _, doc := range accepted {
		if _, err := canonjson.Transform([]byte(doc)); err != nil {
			t.Errorf("Transform(%s): %v", doc, err)
		}
	}
}

// The refusal is exactly encoding/json's ambiguity: for two names a and b
// of one object, Transform refuses them if and only if encoding/json,
// decoding the object into a struct whose field is tagged a, stores b's
// value in that field. Names are drawn from letters whose case folding
// surprises (K and KELVIN SIGN, s and LONG S, dotted and dotless i, the
// three sigmas, ß).
func TestTransform_CaseFoldingIsEncodingJSONs(t *testing.T) {
	alphabet := []rune("aAkK\u212asS\u017fiI\u0130\u0131\u03a3\u03c3\u03c2\u00df_1é")
	rng := rand.New(rand.NewPCG(1, 2))
	name := func() string {
		n := 1 + rng.IntN(2)
		r := make([]rune, n)
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(r)
	}
	refusals := 0
	for range 20000 {
		a, b := name(), name()
		if a == b {
			continue
		}
		doc := fmt.Sprintf(`{%q:1,%q:2}`, a, b)
		_, err := canonjson.Transform([]byte(doc))
		typ := reflect.StructOf([]reflect.StructField{{Name: "F", Type: reflect.TypeFor[int](), Tag: reflect.StructTag(`json:"` + a + `"`)}})
		v := reflect.New(typ)
		if jerr := json.Unmarshal([]byte(doc), v.Interface()); jerr != nil {
			t.Fatal(jerr)
		}
		ambiguous := v.Elem().Field(0).Int() == 2
		if ambiguous != errors.Is(err, canonjson.ErrCaseVariantNames) {
			t.Fatalf("%s: encoding/json reads %q into the field of %q: %v; Transform: %v", doc, b, a, ambiguous, err)
		}
		if ambiguous {
			refusals++
		}
	}
	if refusals < 100 {
		t.Fatalf("only %d ambiguous pairs drawn: the test would not notice a change", refusals)
	}
}

func TestWrite_OmitAndTake(t *testing.T) {
	doc := []byte(`{"order_id": "o-1", "nonce": 7, "idempotency_key": "k\u0031", "amount": 1.50}`)
	h := sha256.New()
	taken, err := canonjson.Write(h, doc, canonjson.Options{Omit: []string{"nonce"}, Take: "idempotency_key"})
	if err != nil {
		t.Fatal(err)
	}
	if string(taken) != `"k\u0031"` {
		t.Errorf("taken %s", taken)
	}
	want := sha256.Sum256([]byte(`{"amount":1.5,"order_id":"o-1"}`))
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Errorf("hash of the written form differs from the canonical form's")
	}
	// Omitted and taken members are still validated, and still count for
	// the case folding check; only top-level members are left out.
	for _, bad := range []string{`{"nonce":[1,}`, `{"nonce":1,"Nonce":2}`, `{"idempotency_key":"a","Idempotency_Key":"b"}`} {
		if _, err := canonjson.Write(&bytes.Buffer{}, []byte(bad), canonjson.Options{Omit: []string{"nonce"}, Take: "idempotency_key"}); err == nil {
			t.Errorf("Write(%s): no error", bad)
		}
	}
	var buf bytes.Buffer
	if _, err := canonjson.Write(&buf, []byte(`{"a":{"nonce":1},"nonce":2}`), canonjson.Options{Omit: []string{"nonce"}}); err != nil || buf.String() != `{"a":{"nonce":1}}` {
		t.Errorf("nested member left out: %s %v", buf.String(), err)
	}
	// A document larger than the buffer is written in pieces, the same bytes.
	var large strings.Builder
	large.WriteString("[")
	for i := range 5000 {
		if i > 0 {
			large.WriteString(", ")
		}
		fmt.Fprintf(&large, `{"v": %d.50, "s": "x\u00e9"}`, i)
	}
	large.WriteString("]")
	buf.Reset()
	if _, err := canonjson.Write(&buf, []byte(large.String()), canonjson.Options{}); err != nil {
		t.Fatal(err)
	}
	whole, err := canonjson.Transform([]byte(large.String()))
	if err != nil || !bytes.Equal(buf.Bytes(), whole) {
		t.Fatalf("Write and Transform differ (%d and %d bytes), %v", buf.Len(), len(whole), err)
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("disk full")
}

func TestWrite_ReportsTheWritersError(t *testing.T) {
	w := &failingWriter{}
	if _, err := canonjson.Write(w, []byte(`{"a":[1,2,3]}`), canonjson.Options{}); err == nil || err.Error() != "disk full" {
		t.Fatalf("err = %v", err)
	}
	if w.n != 1 {
		t.Errorf("written %d times after the first error", w.n)
	}
}
