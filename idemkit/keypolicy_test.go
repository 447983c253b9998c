package idemkit_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// Key vectors for nested excludes and rounding: pairs of arguments that
// must share a key (a retry) and pairs that must not (another request),
// through the fast path (canonical input) and the canonicaliser's
// (whitespace, unsorted members).
func TestNewKey_NestedExcludeAndRoundVectors(t *testing.T) {
	opts := &idemkit.KeyOptions{
		Exclude: []string{"/order/requested_at", "/items/*/nonce", "/meta/a~1b"},
		Round:   map[string]time.Duration{"/sent_at": time.Minute},
	}
	base := `{"items":[{"nonce":"n1","sku":"a"},{"nonce":"n2","sku":"b"}],"meta":{"a/b":1,"c":2},"order":{"id":"o-1","requested_at":"2026-12-02T10:00:01Z"},"sent_at":"2026-12-02T10:00:05Z"}`
	k := mustKey(t, "s", "refund", base, opts)
	same := []string{
		// Excluded nested fields differ.
		`{"items":[{"nonce":"x1","sku":"a"},{"nonce":"x2","sku":"b"}],"meta":{"a/b":9,"c":2},"order":{"id":"o-1","requested_at":"2026-12-02T10:09:00Z"},"sent_at":"2026-12-02T10:00:05Z"}`,
		// Absent counts as excluded.
		`{"items":[{"sku":"a"},{"sku":"b"}],"meta":{"c":2},"order":{"id":"o-1"},"sent_at":"2026-12-02T10:00:05Z"}`,
		// Same minute, another offset, not canonical input.
		`{ "sent_at": "2026-12-02T11:00:59.999+01:00", "order": {"requested_at": 7, "id": "o-1"},
		   "meta": {"c": 2.0}, "items": [{"sku": "a", "nonce": 1}, {"sku": "b"}] }`,
	}
	for _, args := range same {
		if got := mustKey(t, "s", "refund", args, opts); got.ID() != k.ID() {
			t.Errorf("a retry differing only in excluded or rounded fields got another key:\n%s", args)
		}
	}
	differ := map[string]string{
		"sibling of an excluded field": strings.Replace(base, `"id":"o-1"`, `"id":"o-2"`, 1),
		"sibling in an array element":  strings.Replace(base, `"sku":"b"`, `"sku":"c"`, 1),
		"sibling in meta":              strings.Replace(base, `"c":2`, `"c":3`, 1),
		"the next minute":              strings.Replace(base, `10:00:05Z`, `10:01:00Z`, 1),
		"one more element":             strings.Replace(base, `]`, `,{"sku":"c"}]`, 1),
	}
	for name, args := range differ {
		if got := mustKey(t, "s", "refund", args, opts); got.ID() == k.ID() {
			t.Errorf("%s: another request got the retry's key", name)
		}
	}
	// Boundary: truncation, not rounding to the nearest.
	r := &idemkit.KeyOptions{Round: map[string]time.Duration{"/at": time.Minute}}
	a := mustKey(t, "s", "t", `{"at":"2026-12-02T10:00:00Z"}`, r)
	if mustKey(t, "s", "t", `{"at":"2026-12-02T10:00:59.999999999Z"}`, r).ID() != a.ID() {
		t.Error("10:00:59.999999999 is not in 10:00's minute")
	}
	if mustKey(t, "s", "t", `{"at":"2026-12-02T09:59:59.999Z"}`, r).ID() == a.ID() {
		t.Error("09:59:59.999 straddles the boundary and must get another key")
	}
	// A rounded field hashes as its truncated UTC instant.
	if mustKey(t, "s", "t", `{"at":"2026-12-02T10:00:42+00:00"}`, r).ArgsHash() != mustKey(t, "s", "t", `{"at":"2026-12-02T10:00:00Z"}`, nil).ArgsHash() {
		t.Error("the rounded form is not the truncated instant in RFC 3339 UTC")
	}
}

// A pointer to a top-level member is the plain name: the same hash as
// the streaming path Exclude always took.
func TestNewKey_TopLevelPointerIsPlainName(t *testing.T) {
	for _, args := range []string{`{"nonce":1,"text":"hi"}`, `{ "text": "hi", "nonce": 2 }`} {
		p := mustKey(t, "s", "send", args, &idemkit.KeyOptions{Exclude: []string{"/nonce"}})
		n := mustKey(t, "s", "send", args, &idemkit.KeyOptions{Exclude: []string{"nonce"}})
		if p.ID() != n.ID() || p.ArgsHash() != mustKey(t, "s", "send", `{"text":"hi"}`, nil).ArgsHash() {
			t.Errorf("%s: /nonce and nonce hash differently", args)
		}
	}
	// With a nested pointer too (the in-memory path), the top-level
	// exclusion and the explicit key field still hash alike.
	opts := &idemkit.KeyOptions{Exclude: []string{"nonce", "/o/x"}}
	k := mustKey(t, "s", "send", `{"idempotency_key":"k-1","nonce":1,"o":{"x":1,"y":2}}`, opts)
	k2 := mustKey(t, "s", "send", ` {"o":{"y":2},"idempotency_key":"k-1"}`, nil)
	if k.ID() != k2.ID() || k.ArgsHash() != k2.ArgsHash() || k.Source() != "explicit" {
		t.Errorf("explicit key with a nested policy: %v / %v", k, k2)
	}
}

func TestNewKey_RoundRefusesWhatIsNotATimestamp(t *testing.T) {
	opts := &idemkit.KeyOptions{Round: map[string]time.Duration{"/order/requested_at": time.Minute}}
	for _, args := range []string{
		`{"order":{"requested_at":1764669600}}`,
		`{"order":{"requested_at":"now"}}`,
		`{ "order": { "requested_at": "2026-12-02T10:00" } }`,
	} {
		_, err := idemkit.NewKey("s", "refund", []byte(args), opts)
		if !errors.Is(err, idemkit.ErrInvalidArguments) || !strings.Contains(err.Error(), `"/order/requested_at"`) || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("%s: err = %v, want ErrInvalidArguments naming the field and RFC 3339", args, err)
		}
	}
	// null and absent are fine.
	for _, args := range []string{`{"order":{"requested_at":null}}`, `{"order":{}}`, `{}`} {
		if _, err := idemkit.NewKey("s", "refund", []byte(args), opts); err != nil {
			t.Errorf("%s: %v", args, err)
		}
	}
}

// Invalid options are the caller's configuration error: neither sentinel.
func TestNewKey_InvalidPolicyIsAConfigurationError(t *testing.T) {
	for _, opts := range []*idemkit.KeyOptions{
		{Exclude: []string{"/order/~2"}},
		{Round: map[string]time.Duration{"/at": 7 * time.Minute}},
		{Round: map[string]time.Duration{"/at": -time.Second}},
		{Exclude: []string{"/at"}, Round: map[string]time.Duration{"/at": time.Minute}},
	} {
		_, err := idemkit.NewKey("s", "t", []byte(`{"at":"2026-12-02T10:00:00Z"}`), opts)
		if err == nil || errors.Is(err, idemkit.ErrInvalidArguments) || errors.Is(err, idemkit.ErrInvalidKey) {
			t.Errorf("%+v: err = %v, want a configuration error", opts, err)
		}
	}
}

// Hostile input stays refused under a nested policy: case variants in an
// excluded object, and a pointer matches names exactly.
func TestNewKey_NestedPolicyKeepsHostileInputRules(t *testing.T) {
	opts := &idemkit.KeyOptions{Exclude: []string{"/order/nonce"}}
	for _, args := range []string{`{"order":{"Nonce":1,"nonce":2}}`, `{"order":{"nonce":1,"nonce":2}}`} {
		if _, err := idemkit.NewKey("s", "t", []byte(args), opts); !errors.Is(err, idemkit.ErrInvalidArguments) {
			t.Errorf("%s: err = %v, want ErrInvalidArguments", args, err)
		}
	}
	a := mustKey(t, "s", "t", `{"order":{"NONCE":1}}`, opts)
	b := mustKey(t, "s", "t", `{"order":{"NONCE":2}}`, opts)
	if a.ID() == b.ID() {
		t.Error("/order/nonce excluded the member NONCE")
	}
}

// FuzzNewKey_NestedExclude checks nested excludes against a reference:
// decode, delete the members the pointers name, re-encode, canonicalise.
func FuzzNewKey_NestedExclude(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"o":{"x":1,"y":2}}`, `{"a":[{"n":1,"k":2},{"n":3}],"o":{"x":[1,2]}}`,
		`{ "o" : { "y" : 1.0 , "x" : "s" } , "a" : [ ] }`, `{"a":[1,{"n":{"deep":true}}],"z":"\u00e9"}`, `[1]`, `{"o":null}`,
	} {
		f.Add([]byte(s))
	}
	opts := &idemkit.KeyOptions{Exclude: []string{"/o/x", "/a/*/n"}}
	f.Fuzz(func(t *testing.T, args []byte) {
		k, err := idemkit.NewKey("s", "t", args, opts)
		if err != nil {
			if !errors.Is(err, idemkit.ErrInvalidArguments) && !errors.Is(err, idemkit.ErrInvalidKey) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			return
		}
		if v == nil {
			v = map[string]any{}
		}
		if m, ok := v.(map[string]any); ok {
			delete(m, "idempotency_key")
			if o, ok := m["o"].(map[string]any); ok {
				delete(o, "x")
			}
			if a, ok := m["a"].([]any); ok {
				for _, e := range a {
					if e, ok := e.(map[string]any); ok {
						delete(e, "n")
					}
				}
			}
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return
		}
		canon, err := idemkit.CanonicalJSON(raw)
		if err != nil {
			return
		}
		sum := sha256.Sum256(canon)
		if ref := hex.EncodeToString(sum[:]); ref != k.ArgsHash() {
			t.Fatalf("args hash %s, reference %s, for %s", k.ArgsHash(), ref, args)
		}
	})
}

// BenchmarkNewKey_Policies compares a key derived with no policy, a
// top-level exclude (the streaming path), a nested exclude and a rounding
// (the in-memory path) on the same canonical arguments.
func BenchmarkNewKey_Policies(b *testing.B) {
	args := []byte(`{"items":[{"nonce":"n1","sku":"a"},{"nonce":"n2","sku":"b"}],"order":{"id":"o-1","requested_at":"2026-12-02T10:00:01Z"},"sent_at":"2026-12-02T10:00:05Z"}`)
	for _, c := range []struct {
		name string
		opts *idemkit.KeyOptions
	}{
		{"none", nil},
		{"top-level", &idemkit.KeyOptions{Exclude: []string{"sent_at"}}},
		{"nested", &idemkit.KeyOptions{Exclude: []string{"/order/requested_at", "/items/*/nonce"}}},
		{"round", &idemkit.KeyOptions{Round: map[string]time.Duration{"/sent_at": time.Minute}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := idemkit.NewKey("s", "refund", args, c.opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
