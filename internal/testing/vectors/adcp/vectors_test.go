package adcp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// The storyboard's sample requests (universal/idempotency.yaml, AdCP
// compliance 3.0.6): the buyer, the brand and one package. Values are the
// storyboard's; only the shape of a Go builder is ours.
const (
	brandDomain = "acmeoutdoor.example"
	operator    = "pinnacle-agency.example"
)

// mediaBuy is a create_media_buy request of the storyboard, with its
// context.correlation_id named after the step, as the storyboard does.
func mediaBuy(key, start, end string, budget int, step string) []byte {
	req := map[string]any{
		"account":    map[string]any{"brand": map[string]any{"domain": brandDomain}, "operator": operator},
		"brand":      map[string]any{"domain": brandDomain},
		"start_time": start,
		"end_time":   end,
		"packages":   []any{map[string]any{"product_id": "test-product", "budget": budget, "pricing_option_id": "test-pricing"}},
		"context":    map[string]any{"correlation_id": "idempotency--" + step},
	}
	if key != "" {
		req["idempotency_key"] = key
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// The storyboard's three payloads: the missing-key phase's May buy, the
// replay phase's June buy, and the conflict phase's different end_time
// and budget under the replay key.
func missingKeyBuy(step string) []byte {
	return mediaBuy("", "2026-05-01T00:00:00Z", "2026-05-31T23:59:59Z", 5000, step)
}
func juneBuy(key, step string) []byte {
	return mediaBuy(key, "2026-06-01T00:00:00Z", "2026-06-30T23:59:59Z", 5000, step)
}
func conflictBuy(key, step string) []byte {
	return mediaBuy(key, "2026-06-01T00:00:00Z", "2026-09-30T23:59:59Z", 25000, step)
}

// uuidV4 is the storyboard's $generate:uuid_v4: a fresh key per run, so
// that no two runs (or two vectors) share a cache entry.
func uuidV4(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// vector is one translated vector: what it checks, where it comes from,
// and which layers it applies to.
type vector struct {
	id     string
	source string // storyboard step IDs, or the SDK file it comes from
	clock  bool   // the env's Guard runs on a clock the vector drives
	run    func(t *testing.T, e *env)
}

var vectors = []vector{
	{id: "storyboard", source: "idempotency.yaml: every phase, in order", run: vStoryboard},
	{id: "canonical_equivalents", source: "SDK store.js hashPayload (RFC 8785 JCS + SHA-256 after the exclusion list)", run: vCanonical},
	{id: "string_context_in_hash", source: "SDK store.js stripExclusions (context kept when it is a string: si_* tools)", run: vStringContext},
	{id: "principal_scope", source: "idempotency.yaml security note; SDK store.js scope(principal, key)", run: vPrincipalScope},
	{id: "in_flight", source: "SDK store.js check() in-flight claim; create-adcp-server.js in-flight answer", run: vInFlight},
	{id: "errors_not_cached", source: "create-adcp-server.js: errors re-execute on retry, the claim is released", run: vErrorsNotCached},
	{id: "missing_key_forms", source: "create-adcp-server.js: a key that is not a non-empty string is missing or malformed → INVALID_REQUEST", run: vMissingKeyForms},
	{id: "conflict_keeps_original", source: "create-adcp-server.js IDEMPOTENCY_CONFLICT message: use a fresh key, or resend the exact original payload", run: vConflictKeepsOriginal},
	{id: "key_length_bound", source: "create-adcp-server.js IDEMPOTENCY_KEY_PATTERN ^[A-Za-z0-9_.:-]{16,255}$ (the upper bound and the alphabet)", run: vKeyBounds},
	{id: "nested_credentials_excluded", source: "SDK store.js stripPushNotificationCredentials (a JSON Pointer exclude)", run: vNestedCredentials},
	{id: "read_tool_tolerates_key", source: "read-tool-idempotency.yaml (AdCP 3.1, upstream repository): reads accept the idempotency_key, context and ext envelope", run: vReadToolKey},
	// Divergences: the vector's intent does not apply (README, "Not
	// applicable"); each asserts idemkit's own documented behaviour so the
	// README's claim about it is tested too.
	{id: "diverge_expired_key", source: "SDK store.js check(): past the TTL → IDEMPOTENCY_EXPIRED", clock: true, run: dExpired},
	{id: "diverge_short_key", source: "IDEMPOTENCY_KEY_PATTERN lower bound (16)", run: dShortKey},
	{id: "diverge_large_integers", source: "SDK hashPayload: RFC 8785 on JavaScript numbers (IEEE-754 doubles)", run: dLargeIntegers},
	{id: "diverge_duplicate_names", source: "SDK hashPayload: JSON.parse keeps the last of duplicate member names", run: dDuplicateNames},
	{id: "diverge_failed_key_other_payload", source: "create-adcp-server.js + store.js release(): a failed call deletes its claim", run: dFailedKeyOtherPayload},
	{id: "diverge_cross_tool_key", source: "SDK store.js scope(principal, key): the tool is not in the scope", run: dCrossTool},
}

// calls is a small helper over an env.
func (e *env) send(t *testing.T, principal, tool string, args []byte) reply {
	t.Helper()
	return e.d.call(t, principal, tool, args)
}

func wantExecutions(t *testing.T, e *env, executions, buys int, when string) {
	t.Helper()
	gotE, gotB := e.s.counts()
	if gotE != executions || gotB != buys {
		t.Fatalf("%s: the seller ran %d times and holds %d media buys, want %d and %d", when, gotE, gotB, executions, buys)
	}
}

func wantRan(t *testing.T, r reply, step string) string {
	t.Helper()
	if r.IsError || r.Refusal != "" || r.Replayed {
		t.Fatalf("%s: want a first execution, got error=%v refusal=%q replayed=%v: %s", step, r.IsError, r.Refusal, r.Replayed, r.Raw)
	}
	id, _ := r.Result["media_buy_id"].(string)
	if id == "" {
		t.Fatalf("%s: no media_buy_id in %s", step, r.Raw)
	}
	return id
}

func wantReplayOf(t *testing.T, r, first reply, step string) {
	t.Helper()
	if r.IsError || r.Refusal != "" || !r.Replayed {
		t.Fatalf("%s: want a replay, got error=%v refusal=%q replayed=%v: %s", step, r.IsError, r.Refusal, r.Replayed, r.Raw)
	}
	if !jsonEqual(r.Result, first.Result) || r.Text != first.Text {
		t.Fatalf("%s: the replay is not the first answer verbatim:\n got  %q %v\n want %q %v", step, r.Text, r.Result, first.Text, first.Result)
	}
}

func wantRefusal(t *testing.T, r reply, reason, step string) {
	t.Helper()
	if !r.IsError || r.Refusal != reason {
		t.Fatalf("%s: want a %q refusal, got error=%v refusal=%q: %s", step, reason, r.IsError, r.Refusal, r.Raw)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// hexRun finds anything that looks like a digest or fingerprint.
var hexRun = regexp.MustCompile(`[0-9a-fA-F]{16,}`)

// vStoryboard runs the storyboard's phases in order, each step named by
// its storyboard ID.
func vStoryboard(t *testing.T, e *env) {
	const buyer = "compliance-buyer"
	replayKey, freshKey := uuidV4(t), uuidV4(t)
	var initial, fresh reply
	var initialID, freshID string

	step := func(id string, fn func(t *testing.T)) {
		if !t.Run(id, fn) {
			t.FailNow()
		}
	}
	// missing_key: "MUST reject … and MUST NOT create a media buy."
	// Requiring a key is a policy of the MCP instrumentation
	// (instrument.WithRequireKey): the Guard takes the key it is given, so
	// at the Guard layer this step is not run (README).
	if e.d.enforcesRequiredKeys() {
		step("create_media_buy_missing_key", func(t *testing.T) {
			r := e.send(t, buyer, toolCreate, missingKeyBuy("create_media_buy_missing_key"))
			wantRefusal(t, r, spancontract.RefusalMissingKey, "missing key")
			if !strings.Contains(r.Text, "idempotency") {
				t.Errorf("the refusal does not tell the caller what to send (correctable): %q", r.Text)
			}
			wantExecutions(t, e, 0, 0, "after the missing-key call")
		})
	}
	// replay_same_payload/create_media_buy_initial: a fresh key is
	// processed normally; replayed is false or absent.
	step("create_media_buy_initial", func(t *testing.T) {
		initial = e.send(t, buyer, toolCreate, juneBuy(replayKey, "create_media_buy_initial"))
		initialID = wantRan(t, initial, "initial")
		wantExecutions(t, e, 1, 1, "after the initial call")
	})
	// create_media_buy_replay: the same key and payload (the echo-back
	// context differs, as the storyboard's correlation_id does) returns the
	// same media_buy_id, replayed: true, no new side effect.
	step("create_media_buy_replay", func(t *testing.T) {
		r := e.send(t, buyer, toolCreate, juneBuy(replayKey, "create_media_buy_replay"))
		wantReplayOf(t, r, initial, "replay")
		if id, _ := r.Result["media_buy_id"].(string); id != initialID {
			t.Fatalf("replay media_buy_id %q, want the initial %q", id, initialID)
		}
	})
	// no_duplicate_webhooks_on_replay: at most one delivery per logical
	// event across the initial and replay windows.
	step("no_duplicate_webhooks_on_replay", func(t *testing.T) {
		wantExecutions(t, e, 1, 1, "after the replay")
	})
	// key_reuse_conflict/create_media_buy_conflict: same key, a different
	// end_time and budget → IDEMPOTENCY_CONFLICT; the error body carries
	// no cached payload, original request, fingerprint or field pointer
	// (invariant idempotency.conflict_no_payload_leak).
	step("create_media_buy_conflict", func(t *testing.T) {
		r := e.send(t, buyer, toolCreate, conflictBuy(replayKey, "create_media_buy_conflict"))
		wantRefusal(t, r, spancontract.RefusalMismatch, "conflict")
		wantExecutions(t, e, 1, 1, "after the conflicting call")
		for _, leak := range []string{initialID, "2026-06-30", "pending_activation", "idempotency--create_media_buy_initial", "/packages", "budget", replayKey} {
			if strings.Contains(r.Raw, leak) {
				t.Errorf("the conflict answer leaks %q: %s", leak, r.Raw)
			}
		}
		if m := hexRun.FindString(r.Raw); m != "" {
			t.Errorf("the conflict answer carries something like a fingerprint %q: %s", m, r.Raw)
		}
		if !strings.Contains(r.Text, "new idempotency key") {
			t.Errorf("the conflict answer does not tell the buyer to use a fresh key (recovery: correctable): %q", r.Text)
		}
	})
	// fresh_key_new_resource: the same payload under a different key is a
	// new media buy.
	step("create_media_buy_fresh_key", func(t *testing.T) {
		fresh = e.send(t, buyer, toolCreate, juneBuy(freshKey, "create_media_buy_fresh_key"))
		freshID = wantRan(t, fresh, "fresh key")
		if freshID == initialID {
			t.Fatalf("the fresh key returned the initial media_buy_id %q", initialID)
		}
		wantExecutions(t, e, 2, 2, "after the fresh-key call")
	})
	// verify_media_buy_count/get_media_buys_dedup_check: exactly two.
	step("get_media_buys_dedup_check", func(t *testing.T) {
		ids, _ := json.Marshal(map[string]any{
			"account":       map[string]any{"brand": map[string]any{"domain": brandDomain}, "operator": operator},
			"media_buy_ids": []string{initialID, freshID},
			"context":       map[string]any{"correlation_id": "idempotency--get_media_buys_dedup_check"},
		})
		r := e.send(t, buyer, toolList, ids)
		if r.IsError || r.Refusal != "" {
			t.Fatalf("get_media_buys: %s", r.Raw)
		}
		found, _ := r.Result["media_buys"].([]any)
		total, _ := r.Result["total"].(float64)
		if len(found) != 2 || total != 2 {
			t.Fatalf("get_media_buys found %d of the two captured IDs and %v buys in all, want 2 and 2: %s", len(found), r.Result["total"], r.Raw)
		}
	})
}

// vCanonical: payloads equal under RFC 8785 after the exclusion list are
// one request (replay, no new side effect): member order at every depth,
// insignificant whitespace, number forms of one value, a changed echo-back
// context and governance_context. A different value is a conflict.
func vCanonical(t *testing.T, e *env) {
	const buyer = "buyer-canonical"
	key := uuidV4(t)
	base := `{"idempotency_key":"` + key + `","account":{"brand":{"domain":"acmeoutdoor.example"},"operator":"pinnacle-agency.example"},"brand":{"domain":"acmeoutdoor.example"},"start_time":"2026-06-01T00:00:00Z","end_time":"2026-06-30T23:59:59Z","packages":[{"product_id":"test-product","budget":5000,"pricing_option_id":"test-pricing"}],"context":{"correlation_id":"c-1"}}`
	first := e.send(t, buyer, toolCreate, []byte(base))
	wantRan(t, first, "first")
	for _, v := range []struct{ name, doc string }{
		{"members reordered at every depth", `{"packages":[{"pricing_option_id":"test-pricing","budget":5000,"product_id":"test-product"}],"end_time":"2026-06-30T23:59:59Z","start_time":"2026-06-01T00:00:00Z","brand":{"domain":"acmeoutdoor.example"},"account":{"operator":"pinnacle-agency.example","brand":{"domain":"acmeoutdoor.example"}},"context":{"correlation_id":"c-1"},"idempotency_key":"` + key + `"}`},
		{"insignificant whitespace", "\r\n " + indented(base) + "\n\t"},
		{"budget 5000.0", strings.Replace(base, `"budget":5000`, `"budget":5000.0`, 1)},
		{"budget 5e3", strings.Replace(base, `"budget":5000`, `"budget":5e3`, 1)},
		{"budget 5.000E+3", strings.Replace(base, `"budget":5000`, `"budget":5.000E+3`, 1)},
		{"escaped string form", strings.Replace(base, `"test-product"`, `"test\u002dproduct"`, 1)},
		{"a retry's new correlation_id (context excluded)", strings.Replace(base, `"c-1"`, `"c-2-retry"`, 1)},
		{"a refreshed governance_context (excluded)", strings.Replace(base, `"context":{`, `"governance_context":"eyJhbGciOiJFUzI1NiJ9.refreshed","context":{`, 1)},
	} {
		r := e.send(t, buyer, toolCreate, []byte(v.doc))
		wantReplayOf(t, r, first, v.name)
	}
	wantExecutions(t, e, 1, 1, "after the equivalent payloads")
	for _, v := range []struct{ name, doc string }{
		{"budget 5001", strings.Replace(base, `"budget":5000`, `"budget":5001`, 1)},
		{"budget 5000.5", strings.Replace(base, `"budget":5000`, `"budget":5000.5`, 1)},
		{"a package more", strings.Replace(base, `}],"context"`, `},{"product_id":"test-product","budget":1,"pricing_option_id":"test-pricing"}],"context"`, 1)},
		{"product_id letter case", strings.Replace(base, `"test-product"`, `"Test-Product"`, 1)},
	} {
		r := e.send(t, buyer, toolCreate, []byte(v.doc))
		wantRefusal(t, r, spancontract.RefusalMismatch, v.name)
	}
	wantExecutions(t, e, 1, 1, "after the different payloads")

	// RFC 8785 number and string forms: -0 and 0.0 are 0, 1E-7 is
	// 0.0000001, an escaped é is é; a decomposed é (e + U+0301) is another
	// string (JCS does not normalise Unicode).
	key2 := uuidV4(t)
	base2 := `{"idempotency_key":"` + key2 + `","brand":{"domain":"café.example"},"packages":[{"product_id":"p","budget":0,"bid_floor":0.0000001}]}`
	first2 := e.send(t, buyer, toolCreate, []byte(base2))
	wantRan(t, first2, "second document")
	for _, v := range []struct{ name, doc string }{
		{"budget -0", strings.Replace(base2, `"budget":0`, `"budget":-0`, 1)},
		{"budget 0.0", strings.Replace(base2, `"budget":0`, `"budget":0.0`, 1)},
		{"bid_floor 1E-7", strings.Replace(base2, `0.0000001`, `1E-7`, 1)},
		{"é escaped", strings.Replace(base2, `café`, `caf\u00e9`, 1)},
	} {
		wantReplayOf(t, e.send(t, buyer, toolCreate, []byte(v.doc)), first2, v.name)
	}
	for _, v := range []struct{ name, doc string }{
		{"é decomposed", strings.Replace(base2, `café`, "cafe\u0301", 1)},
		{"budget as a string", strings.Replace(base2, `"budget":0`, `"budget":"0"`, 1)},
	} {
		wantRefusal(t, e.send(t, buyer, toolCreate, []byte(v.doc)), spancontract.RefusalMismatch, v.name)
	}
	wantExecutions(t, e, 2, 2, "after the second document's forms")
}

// indented is doc with JSON's insignificant whitespace added (tabs and
// newlines between tokens, ": " after member names), strings untouched.
func indented(doc string) string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(doc), " ", "\t"); err != nil {
		panic(err)
	}
	return b.String()
}

// vStringContext: for the SI tools context is a load-bearing string; a
// retry with a different one must be a conflict, never a replay.
func vStringContext(t *testing.T, e *env) {
	const buyer = "buyer-si"
	key := uuidV4(t)
	doc := func(ctx string) []byte {
		b, _ := json.Marshal(map[string]any{"idempotency_key": key, "offering_id": "off-1", "context": ctx})
		return b
	}
	first := e.send(t, buyer, toolSession, doc("The user asked for a tent under $300."))
	if first.IsError || first.Replayed {
		t.Fatalf("first si_initiate_session: %s", first.Raw)
	}
	wantReplayOf(t, e.send(t, buyer, toolSession, doc("The user asked for a tent under $300.")), first, "same handoff text")
	wantRefusal(t, e.send(t, buyer, toolSession, doc("The user asked for a stove.")), spancontract.RefusalMismatch, "other handoff text")
	wantExecutions(t, e, 1, 0, "after the SI calls")
}

// vPrincipalScope: keys are scoped per principal, so one tenant's key
// never replays another tenant's cached response (the storyboard's
// cross-tenant replay oracle).
func vPrincipalScope(t *testing.T, e *env) {
	key := uuidV4(t)
	a := e.send(t, "buyer-a", toolCreate, juneBuy(key, "principal_a"))
	idA := wantRan(t, a, "buyer-a")
	b := e.send(t, "buyer-b", toolCreate, juneBuy(key, "principal_b"))
	idB := wantRan(t, b, "buyer-b with buyer-a's key")
	if idA == idB {
		t.Fatalf("two principals got one media buy %q", idA)
	}
	wantExecutions(t, e, 2, 2, "after two principals")
	wantReplayOf(t, e.send(t, "buyer-b", toolCreate, juneBuy(key, "principal_b_retry")), b, "buyer-b's retry")
	// A conflicting payload under another principal's key is not a
	// conflict either: it reveals nothing about buyer-a's request.
	c := e.send(t, "buyer-c", toolCreate, conflictBuy(key, "principal_c"))
	wantRan(t, c, "buyer-c with buyer-a's key and another payload")
	wantExecutions(t, e, 3, 3, "after three principals")
}

// vInFlight: a parallel request with the same key while the first runs is
// told it is in flight (the SDK: SERVICE_UNAVAILABLE, retry_after) and
// runs nothing; once the first finishes, a retry replays it.
func vInFlight(t *testing.T, e *env) {
	const buyer = "buyer-inflight"
	key := uuidV4(t)
	hold, started := make(chan struct{}), make(chan struct{}, 1)
	e.s.mu.Lock()
	e.s.hold, e.s.started = hold, started
	e.s.mu.Unlock()
	var first reply
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = e.send(t, buyer, toolCreate, juneBuy(key, "in_flight_first"))
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		close(hold)
		wg.Wait()
		t.Fatal("the first call never reached the seller")
	}
	dup := e.send(t, buyer, toolCreate, juneBuy(key, "in_flight_parallel"))
	// The SDK answers in-flight before it compares the payload; idemkit
	// compares the payload first and says mismatch. Both refuse and run
	// nothing (README: a difference of wording, not of intent).
	other := e.send(t, buyer, toolCreate, conflictBuy(key, "in_flight_other_payload"))
	e.s.mu.Lock()
	e.s.hold = nil
	e.s.mu.Unlock()
	close(hold)
	wg.Wait()
	wantRefusal(t, dup, spancontract.RefusalInProgress, "parallel duplicate")
	wantRefusal(t, other, spancontract.RefusalMismatch, "another payload under the in-flight key")
	if !strings.Contains(dup.Text, "in progress") {
		t.Errorf("the in-flight answer does not say so: %q", dup.Text)
	}
	if dup.RetryAfter <= 0 { // the SDK's retry_after
		t.Errorf("the in-flight answer carries no retry hint: %s", dup.Raw)
	}
	wantRan(t, first, "first")
	wantExecutions(t, e, 1, 1, "after the parallel duplicate")
	wantReplayOf(t, e.send(t, buyer, toolCreate, juneBuy(key, "in_flight_retry")), first, "retry after the first finished")
	wantExecutions(t, e, 1, 1, "after the retry")
}

// vErrorsNotCached: a failed mutation does not consume its key; the retry
// runs again, and its success is what later retries replay.
func vErrorsNotCached(t *testing.T, e *env) {
	const buyer = "buyer-errors"
	key := uuidV4(t)
	e.s.mu.Lock()
	e.s.failNext = 1
	e.s.mu.Unlock()
	r := e.send(t, buyer, toolCreate, juneBuy(key, "errors_first"))
	if !r.IsError || r.Refusal != "" || r.Replayed {
		t.Fatalf("first call: want the tool's own error, got %s", r.Raw)
	}
	wantExecutions(t, e, 1, 0, "after the failed call")
	second := e.send(t, buyer, toolCreate, juneBuy(key, "errors_retry"))
	wantRan(t, second, "retry after a failure")
	wantExecutions(t, e, 2, 1, "after the retry")
	wantReplayOf(t, e.send(t, buyer, toolCreate, juneBuy(key, "errors_retry_2")), second, "second retry")
}

// vMissingKeyForms: a null key is a missing key; an empty one or a number
// is a malformed one. Each is refused (INVALID_REQUEST in AdCP) and runs
// nothing.
func vMissingKeyForms(t *testing.T, e *env) {
	const buyer = "buyer-keyforms"
	doc := func(v string) []byte {
		return []byte(strings.Replace(string(missingKeyBuy("missing_key_forms")), `{`, `{"idempotency_key":`+v+`,`, 1))
	}
	if e.d.enforcesRequiredKeys() {
		wantRefusal(t, e.send(t, buyer, toolCreate, doc("null")), spancontract.RefusalMissingKey, "a null key")
	}
	wantRefusal(t, e.send(t, buyer, toolCreate, doc(`""`)), spancontract.RefusalInvalidKey, "an empty key")
	// A number: the MCP instrumentation reads the key argument itself and
	// says invalid_key (internal/mcpcall/scope.go); NewKey classes the same
	// input as ErrInvalidArguments (its doc: "an explicit-key field that is
	// not a string"). Both refuse and run nothing.
	want := spancontract.RefusalInvalidArguments
	if e.d.enforcesRequiredKeys() {
		want = spancontract.RefusalInvalidKey
	}
	wantRefusal(t, e.send(t, buyer, toolCreate, doc("12345678901234567890")), want, "a number as the key")
	wantExecutions(t, e, 0, 0, "after the malformed keys")
}

// vConflictKeepsOriginal: a conflict changes nothing: the original payload
// still replays the original answer, and a fresh key runs the new payload.
func vConflictKeepsOriginal(t *testing.T, e *env) {
	const buyer = "buyer-conflict"
	key := uuidV4(t)
	first := e.send(t, buyer, toolCreate, juneBuy(key, "original"))
	wantRan(t, first, "original")
	wantRefusal(t, e.send(t, buyer, toolCreate, conflictBuy(key, "conflict")), spancontract.RefusalMismatch, "conflict")
	wantReplayOf(t, e.send(t, buyer, toolCreate, juneBuy(key, "original_again")), first, "the original resent after the conflict")
	wantRan(t, e.send(t, buyer, toolCreate, conflictBuy(uuidV4(t), "conflict_fresh_key")), "the new payload under a fresh key")
	wantExecutions(t, e, 2, 2, "after the conflict and the fresh key")
}

// vKeyBounds: every key of the AdCP pattern is accepted (its alphabet,
// 255 characters); a 256-character key is refused by both and runs
// nothing.
func vKeyBounds(t *testing.T, e *env) {
	const buyer = "buyer-keys"
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-"
	long := strings.Repeat(alphabet, 4)[:255]
	wantRan(t, e.send(t, buyer, toolCreate, juneBuy(long, "key_255")), "255-character key")
	wantRan(t, e.send(t, buyer, toolCreate, juneBuy("adcp:key_v1.0-"+uuidV4(t), "key_alphabet")), "a key using every separator")
	wantExecutions(t, e, 2, 2, "after the valid keys")
	r := e.send(t, buyer, toolCreate, juneBuy(long+"x", "key_256"))
	wantRefusal(t, r, spancontract.RefusalInvalidKey, "256-character key")
	wantExecutions(t, e, 2, 2, "after the over-long key")
}

// vReadToolKey: a read-only task called with the every-request envelope
// (idempotency_key, context, ext) is answered normally with its context
// echoed, never rejected by the wrapper; and a read without a key is
// accepted too (the 3.1 grace window's accept branch). Reads are not
// deduplicated: each one reaches the seller.
func vReadToolKey(t *testing.T, e *env) {
	const buyer = "buyer-reads"
	read := func(key, corr string) reply {
		req := map[string]any{
			"account":       map[string]any{"brand": map[string]any{"domain": brandDomain}, "operator": operator},
			"media_buy_ids": []string{},
			"context":       map[string]any{"correlation_id": corr},
			"ext":           map[string]any{"adcp": map[string]any{"storyboard": "read_tool_idempotency", "probe": "get_media_buys"}},
		}
		if key != "" {
			req["idempotency_key"] = key
		}
		b, _ := json.Marshal(req)
		return e.send(t, buyer, toolList, b)
	}
	for _, c := range []struct{ key, corr string }{
		{uuidV4(t), "read_tool_idempotency--get_media_buys_with_key"},
		{"", "read_tool_idempotency--get_media_buys_omitted_key_grace"},
	} {
		r := read(c.key, c.corr)
		if r.IsError || r.Refusal != "" || r.Replayed {
			t.Fatalf("a read with key %q was not answered normally: %s", c.key, r.Raw)
		}
		ctx, _ := r.Result["context"].(map[string]any)
		if ctx["correlation_id"] != c.corr {
			t.Fatalf("the read's context came back as %v, want correlation_id %q", r.Result["context"], c.corr)
		}
		if _, ok := r.Result["media_buys"].([]any); !ok {
			t.Fatalf("no media_buys array: %s", r.Raw)
		}
	}
}

// dExpired: AdCP refuses a key past its TTL with IDEMPOTENCY_EXPIRED.
// idemkit treats a call after the window as a new request (a deliberate
// repeat; a new record with a new downstream key).
func dExpired(t *testing.T, e *env) {
	const buyer = "buyer-expired"
	key := uuidV4(t)
	first := wantRan(t, e.send(t, buyer, toolCreate, juneBuy(key, "expired_first")), "first")
	e.advance(11 * time.Minute) // past idemkit.DefaultWindow
	again := wantRan(t, e.send(t, buyer, toolCreate, juneBuy(key, "expired_again")), "after the window")
	if again == first {
		t.Fatalf("after the window the key replayed %q", first)
	}
	wantExecutions(t, e, 2, 2, "after the window")
}

// dShortKey: AdCP refuses keys under 16 characters or outside
// [A-Za-z0-9_.:-]; idemkit accepts any printable-ASCII key of 1 to 255
// bytes.
func dShortKey(t *testing.T, e *env) {
	wantRan(t, e.send(t, "buyer-short", toolCreate, juneBuy("k1", "short_key")), "a 2-character key")
	wantRan(t, e.send(t, "buyer-short", toolCreate, juneBuy("order 1001 / refund #2", "spaced_key")), "a key with spaces, / and #")
	wantExecutions(t, e, 2, 2, "after the keys outside AdCP's pattern")
}

// vNestedCredentials: AdCP leaves a rotated
// push_notification_config.authentication.credentials out of the hash, so
// a retry that carries the rotated credential replays the first answer.
// idemkit does the same with a JSON Pointer exclude (seller_test.go's
// excluded list); a change of a sibling field (the webhook URL) is still a
// mismatch, refused, nothing run.
func vNestedCredentials(t *testing.T, e *env) {
	const buyer = "buyer-webhooks"
	key := uuidV4(t)
	doc := func(url, cred string) []byte {
		var m map[string]any
		_ = json.Unmarshal(juneBuy(key, "nested_credentials"), &m)
		m["push_notification_config"] = map[string]any{"url": url,
			"authentication": map[string]any{"schemes": []string{"Bearer"}, "credentials": cred}}
		b, _ := json.Marshal(m)
		return b
	}
	first := e.send(t, buyer, toolCreate, doc("https://buyer.example/hook", "secret-1-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"))
	wantRan(t, first, "first")
	wantReplayOf(t, e.send(t, buyer, toolCreate, doc("https://buyer.example/hook", "secret-2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")), first, "rotated credential")
	wantRefusal(t, e.send(t, buyer, toolCreate, doc("https://other.example/hook", "secret-2-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")), spancontract.RefusalMismatch, "another webhook URL")
	wantExecutions(t, e, 1, 1, "after the rotated credential and the other URL")
}

// dLargeIntegers: under RFC 8785's double semantics (the SDK's JSON.parse)
// 9007199254740992 and 9007199254740993 are one number, so a retry with the
// other would replay; idemkit compares exact decimal values (DESIGN.md,
// "A key never merges two different calls"): the second is a mismatch.
func dLargeIntegers(t *testing.T, e *env) {
	const buyer = "buyer-bigint"
	key := uuidV4(t)
	doc := func(n string) []byte {
		return []byte(`{"idempotency_key":"` + key + `","brand":{"domain":"acmeoutdoor.example"},"packages":[{"product_id":"p","budget":` + n + `}]}`)
	}
	wantRan(t, e.send(t, buyer, toolCreate, doc("9007199254740992")), "2^53")
	r := e.send(t, buyer, toolCreate, doc("9007199254740993"))
	wantRefusal(t, r, spancontract.RefusalMismatch, "2^53+1 under the same key")
	wantExecutions(t, e, 1, 1, "after 2^53+1")
}

// dDuplicateNames: JSON.parse keeps the last of two equal member names, so
// the SDK hashes (and runs) {"budget":25000}; idemkit refuses arguments
// with duplicate names (its decoder and the handler's might disagree on
// which one counts) and runs nothing.
func dDuplicateNames(t *testing.T, e *env) {
	key := uuidV4(t)
	doc := `{"idempotency_key":"` + key + `","brand":{"domain":"acmeoutdoor.example"},"packages":[{"product_id":"p","budget":5000,"budget":25000}]}`
	r := e.send(t, "buyer-dupnames", toolCreate, []byte(doc))
	wantRefusal(t, r, spancontract.RefusalInvalidArguments, "duplicate member names")
	wantExecutions(t, e, 0, 0, "after duplicate member names")
}

// dFailedKeyOtherPayload: after a failed call the SDK deletes the claim,
// so another payload under the same key runs as a new request. idemkit
// keeps the record, bound to its first arguments, for the whole window:
// another payload is a mismatch (refused, nothing run), and the original
// payload's retry takes the record over and runs. Every attempt of one
// record forwards one downstream key, which a provider would see reused
// with other parameters otherwise.
func dFailedKeyOtherPayload(t *testing.T, e *env) {
	const buyer = "buyer-failed"
	key := uuidV4(t)
	e.s.mu.Lock()
	e.s.failNext = 1
	e.s.mu.Unlock()
	r := e.send(t, buyer, toolCreate, juneBuy(key, "failed"))
	if !r.IsError || r.Refusal != "" {
		t.Fatalf("first call: want the tool's own error, got %s", r.Raw)
	}
	wantRefusal(t, e.send(t, buyer, toolCreate, conflictBuy(key, "other_payload_after_failure")), spancontract.RefusalMismatch, "another payload under the failed call's key")
	wantExecutions(t, e, 1, 0, "after the other payload")
	wantRan(t, e.send(t, buyer, toolCreate, juneBuy(key, "original_after_failure")), "the original payload's retry")
	wantExecutions(t, e, 2, 1, "after the original's retry")
}

// dCrossTool: the AdCP SDK scopes a key by principal only, so one key sent
// to two tools is a conflict there. idemkit keys name the tool: the second
// tool runs.
func dCrossTool(t *testing.T, e *env) {
	const buyer = "buyer-crosstool"
	key := uuidV4(t)
	wantRan(t, e.send(t, buyer, toolCreate, juneBuy(key, "cross_tool")), "create_media_buy")
	b, _ := json.Marshal(map[string]any{"idempotency_key": key, "offering_id": "off-1", "context": "handoff"})
	r := e.send(t, buyer, toolSession, b)
	if r.IsError || r.Replayed {
		t.Fatalf("si_initiate_session with create_media_buy's key: want a new execution, got %s", r.Raw)
	}
	wantExecutions(t, e, 2, 1, "after the second tool")
}
