package mcpcall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

var testHashKey = []byte("0123456789abcdef0123456789abcdef")

// plainSHA256 is the unkeyed hash a dictionary attack recomputes: the
// first 32 hex characters of the SHA-256 of s.
func plainSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:32]
}

func subjectEmail(context.Context) string { return "alice@example.com" }

// With a hash key, every hash on the span is keyed: none equals the plain
// SHA-256 a reader recomputes from guessed arguments and subject, and two
// replicas with the same key export the same values, so that the
// Collector still groups their duplicates.
func TestCallTool_HashKeyKeysEveryExportedHash(t *testing.T) {
	const args = `{"order_id":"ord_1012","amount_cents":250}`
	k, err := idemkit.NewKey("alice@example.com", "refund", []byte(args), nil)
	if err != nil {
		t.Fatal(err)
	}
	replica := func(key []byte) map[string]any {
		r := newRig(t, rigConfig{session: "mcp-session-secret", cfg: func(c *Config) {
			c.Subject = subjectEmail
			c.HashKey = key
		}})
		r.tool("refund", ToolInfo{}, refundResult)
		r.call("refund", args, nil)
		return r.last()
	}
	a, b, plain := replica(testHashKey), replica(testHashKey), replica(nil)
	unkeyed := map[string]string{
		sc.ArgsHash:    plainSHA256(`{"amount_cents":250,"order_id":"ord_1012"}`), // the canonical arguments
		sc.KeyHash:     k.Hash(),
		sc.SubjectHash: plainSHA256("alice@example.com"),
	}
	for name, want := range unkeyed {
		if plain[name] != want {
			t.Errorf("without a key, %s = %v, want the plain SHA-256 %s", name, plain[name], want)
		}
	}
	for _, name := range []string{sc.ArgsHash, sc.KeyHash, sc.SubjectHash, sc.MCPSessionID} {
		if a[name] == nil || a[name] != b[name] {
			t.Errorf("%s: %v on one replica, %v on the other; want one keyed value", name, a[name], b[name])
		}
		if a[name] == plain[name] || a[name] == unkeyed[name] {
			t.Errorf("%s = %v with a key: the unkeyed value", name, a[name])
		}
	}
	h := hashkey.New(testHashKey)
	if a[sc.ArgsHash] != h.ArgsHash(k.ArgsHash()) || a[sc.KeyHash] != h.KeyHash(k.ID()) || a[sc.SubjectHash] != h.SubjectHash("alice@example.com") ||
		a[sc.MCPSessionID] != h.SessionHash("mcp-session-secret") {
		t.Errorf("span hashes %v, want hashkey.Hasher's under the key", a)
	}
	if other := replica([]byte("another key, another deployment")); other[sc.KeyHash] == a[sc.KeyHash] {
		t.Errorf("two keys gave the same key hash %v", a[sc.KeyHash])
	}
}

// In session scope the session ID is the credential that reaches the
// session's stored results: spans carry its hash, on every request (with
// or without a hash key), and the raw ID only on request.
func TestOp_SessionIDIsExportedHashedUnlessOptedIn(t *testing.T) {
	const sid = "3f0c9a8e5b1d4c7f9e2a6b0d8c4f1a3e"
	r := newRig(t, rigConfig{session: sid, authentc: true})
	r.tool("refund", ToolInfo{}, refundResult)
	r.call("refund", `{"a":1}`, nil)
	r.send("tools/list", nil)
	ended := r.sr.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want 2", len(ended))
	}
	for _, s := range ended {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), sid) {
				t.Errorf("span %q: %s = %q carries the raw session ID", s.Name(), kv.Key, kv.Value.String())
			}
		}
		if got := attrsOf(s)[sc.MCPSessionID]; got != (hashkey.Hasher{}).SessionHash(sid) {
			t.Errorf("span %q: mcp.session.id = %v, want the hash of the session ID", s.Name(), got)
		}
	}
	raw := newRig(t, rigConfig{session: sid, authentc: true, cfg: func(c *Config) { c.RawSessionID = true }})
	raw.tool("refund", ToolInfo{}, refundResult)
	raw.call("refund", `{"a":1}`, nil)
	if got := raw.last()[sc.MCPSessionID]; got != sid {
		t.Errorf("mcp.session.id = %v with RawSessionID, want %q", got, sid)
	}
	// mcp-go's stdio placeholder names no session: kept as it is, so that
	// the Collector still treats it as unreliable.
	if got := r.srv.in.SessionAttr("stdio"); got != "stdio" {
		t.Errorf("SessionAttr(stdio) = %q", got)
	}
}

// The instrumentation applies its hash key to the Guard, so that the key
// hash in a store error (the span's exception event, the log) is keyed
// too; and a Guard's own key reaches the spans.
func TestCallTool_HashKeyReachesTheGuard(t *testing.T) {
	r := newRig(t, rigConfig{store: &failingStore{}, cfg: func(c *Config) {
		c.Subject = subjectEmail
		c.HashKey = testHashKey
	}})
	r.tool("refund", ToolInfo{}, refundResult)
	r.call("refund", `{"a":1}`, nil)
	k, _ := idemkit.NewKey("alice@example.com", "refund", []byte(`{"a":1}`), nil)
	spans := r.spans("tools/call refund")
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	events := eventText(spans[0])
	if strings.Contains(events, k.Hash()) || !strings.Contains(events, hashkey.New(testHashKey).KeyHash(k.ID())) {
		t.Errorf("exception events %q: want the keyed key hash, never the plain %s", events, k.Hash())
	}

	g := newRig(t, rigConfig{guard: &idemkit.Config{HashKey: testHashKey}, cfg: withSubject(subjectEmail)})
	g.tool("refund", ToolInfo{}, refundResult)
	g.call("refund", `{"a":1}`, nil)
	if got := g.last()[sc.KeyHash]; got != hashkey.New(testHashKey).KeyHash(k.ID()) {
		t.Errorf("key hash %v with the Guard's hash key, want it keyed", got)
	}
}

func eventText(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, ev := range s.Events() {
		for _, kv := range ev.Attributes {
			b.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
	}
	return b.String()
}

func attrsOf(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// failingStore fails every claim.
type failingStore struct{ idemkit.MemoryStore }

func (*failingStore) Claim(context.Context, idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, errors.New("connection refused")
}

// The attack the hash key stops: refunds whose arguments are an order ID
// and an amount, and a span reader who hashes every plausible pair. From
// unkeyed spans it recovers every call's arguments; from keyed ones none.
func TestCallTool_DictionaryRecoversUnkeyedArgumentsOnly(t *testing.T) {
	amounts := []int{100, 250, 500, 999, 1250, 2000, 5000}
	recovered := func(key []byte) (found, calls int) {
		r := newRig(t, rigConfig{cfg: func(c *Config) {
			c.Subject = subjectEmail
			c.HashKey = key
		}})
		r.tool("refund", ToolInfo{}, refundResult)
		for i := range 44 {
			r.call("refund", fmt.Sprintf(`{"order_id":"ord_%d","amount_cents":%d}`, 1000+i*3, amounts[i%len(amounts)]), nil)
		}
		// The dictionary: every order ID in range with every amount.
		dict := map[string]string{}
		for order := 1000; order < 1200; order++ {
			for amount := 0; amount <= 5000; amount += 50 {
				args := fmt.Sprintf(`{"amount_cents":%d,"order_id":"ord_%d"}`, amount, order)
				dict[plainSHA256(args)] = args
			}
			for _, amount := range amounts {
				args := fmt.Sprintf(`{"amount_cents":%d,"order_id":"ord_%d"}`, amount, order)
				dict[plainSHA256(args)] = args
			}
		}
		for _, s := range r.spans("tools/call refund") {
			calls++
			if _, ok := dict[attrsOf(s)[sc.ArgsHash].(string)]; ok {
				found++
			}
		}
		return found, calls
	}
	if found, calls := recovered(nil); calls != 44 || found != 44 {
		t.Fatalf("unkeyed: the dictionary recovered %d of %d calls' arguments; the test expects it to recover all", found, calls)
	}
	if found, calls := recovered(testHashKey); calls != 44 || found != 0 {
		t.Fatalf("keyed: the dictionary recovered %d of %d calls' arguments, want none", found, calls)
	}
}
