package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Session binding: a session belongs to the subject that initialized it
// (or to none). A request that names it with another subject (a stolen or
// guessed session ID; a credential dropped, added or swapped) is answered
// 404 as for an unknown session and reaches nothing of the session.

// victimClient is a real mcp-go client whose every request carries hdr.
func victimClient(t *testing.T, url string, hdr map[string]string, h client.ElicitationHandler) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(hdr))
	if err != nil {
		t.Fatal(err)
	}
	var opts []client.ClientOption
	if h != nil {
		opts = append(opts, client.WithElicitationHandler(h))
	}
	return startClient(t, client.NewClient(tr, opts...))
}

// hijacker is a raw client that names sid with its own headers.
func hijacker(t *testing.T, url, sid string, hdr http.Header) *rawClient {
	c := newRawClient(t, url, hdr)
	c.sid = sid
	return c
}

// checkNotFound asserts the answer an unknown session gets.
func checkNotFound(t *testing.T, what string, a rawAnswer) {
	t.Helper()
	if a.status != http.StatusNotFound || !hasText(a.body, "Session not found") || a.msg["result"] != nil {
		t.Errorf("%s: %d %s, want 404 Session not found", what, a.status, a.body)
	}
}

// TestGateway_SessionIsBoundToItsSubject: another caller's credential, no
// credential, a credential without a value and the same bytes under another
// scheme all get 404 on tools/call (nothing runs), on the GET stream (not
// attached) and, when they carry a credential, on DELETE (the session
// lives on); a DELETE without any credential ends it; a session initialized
// without a credential refuses a request that adds one. The victim's
// session keeps working, and the victim's own credential, however spelled
// (scheme case, spaces), is still the victim.
func TestGateway_SessionIsBoundToItsSubject(t *testing.T) {
	for _, tc := range []struct {
		name      string
		header    string // the subject header ("" for Authorization)
		victim    string // the victim's value of it ("" for none)
		tool      string // what the victim may run
		attackers []string
		same      []string // other spellings of the victim's value
	}{
		{"bearer", "", "Bearer alice", "issue_refund",
			[]string{"Bearer mallory", "", "Bearer ", "Bearer", "Basic alice", "Bearer alice2", "Bearer Alice"}, []string{"bearer   alice", "BEARER alice "}},
		{"unauthenticated", "", "", "lookup", []string{"Bearer mallory", "Basic YWxpY2U6cHc="}, []string{"Bearer ", "Bearer"}},
		{"x-user", "X-User", "alice", "issue_refund", []string{"mallory", "", "Alice", "none"}, []string{" alice "}},
		{"x-user-none", "X-User", "", "lookup", []string{"none", "alice"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t)
			header := "Authorization"
			cfg := Config{Guard: newGuard(t)}
			if tc.header != "" {
				header, cfg.SubjectHeader = tc.header, tc.header
			}
			_, url := newGatewayServer(t, up.URL, cfg)
			vh := map[string]string{}
			if tc.victim != "" {
				vh[header] = tc.victim
			}
			victim := victimClient(t, url, vh, nil)
			sid := victim.GetSessionId()
			if sid == "" {
				t.Fatal("the victim has no session ID")
			}
			args := map[string]any{"order_id": "ord_1001", "amount_cents": 25}
			for _, v := range tc.attackers {
				hdr := http.Header{}
				if v != "" {
					hdr.Set(header, v)
				}
				m := hijacker(t, url, sid, hdr)
				checkNotFound(t, "tools/call from "+header+" "+v, m.call(tc.tool, args))
				checkNotFound(t, "a notification from "+header+" "+v, m.post(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				req.Header = hdr.Clone()
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Mcp-Session-Id", sid)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("GET stream from %s %q: %d, want 404", header, v, resp.StatusCode)
				}
				resp.Body.Close()
				cancel()
				if v != "" && !credentialless(header, v) {
					checkNotFound(t, "DELETE from "+header+" "+v, m.send(http.MethodDelete, ""))
				}
			}
			if n := up.count(tc.tool); n != 0 {
				t.Fatalf("%s ran %d times for callers who named another's session", tc.tool, n)
			}
			// The victim's session still works: its call runs once.
			if res := callTool(t, victim, tc.tool, args); res.IsError || up.count(tc.tool) != 1 {
				t.Fatalf("the victim's call: %q, %d runs", text(res), up.count(tc.tool))
			}
			for _, v := range tc.same {
				hdr := http.Header{}
				hdr.Set(header, v)
				if a := hijacker(t, url, sid, hdr).call("lookup", args); a.status != http.StatusOK || a.msg["result"] == nil {
					t.Errorf("the victim's own %s %q: %d %s, want it served", header, v, a.status, a.body)
				}
			}
			// The subject header twice (the victim's value and another) is
			// no credential-less DELETE: it is refused, and the session
			// lives on.
			if d := hijacker(t, url, sid, http.Header{header: {tc.victim, "mallory"}}).send(http.MethodDelete, ""); d.status != http.StatusBadRequest {
				t.Errorf("a DELETE with %s twice: %d %s, want 400", header, d.status, d.body)
			}
			if a := hijacker(t, url, sid, http.Header{header: {tc.victim}}).call("lookup", args); a.status != http.StatusOK || a.msg["result"] == nil {
				t.Errorf("the victim's session after a DELETE with %s twice: %d %s, want it served", header, a.status, a.body)
			}
			// A DELETE without any credential may end the session (mcp-go's
			// client sends its closing DELETE without its headers): it
			// ends it, and reveals nothing.
			if d := hijacker(t, url, sid, http.Header{}).send(http.MethodDelete, ""); d.status/100 != 2 {
				t.Fatalf("a DELETE without a credential: %d %s, want the session ended", d.status, d.body)
			}
			checkNotFound(t, "the victim's call after the session ended", hijacker(t, url, sid, http.Header{header: {tc.victim}}).call("lookup", args))
		})
	}
}

// TestGateway_NoSubjectHeaderBindsNothing: with --subject-header - the
// session is the scope and the session ID the only credential: an
// Authorization header (or another) on it changes nothing.
func TestGateway_NoSubjectHeaderBindsNothing(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), SubjectHeader: "-"})
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer alice"}})
	c.mustInitialize()
	c.hdr = http.Header{"Authorization": {"Bearer bob"}}
	if r := c.call("issue_refund", map[string]any{"order_id": "o-1"}).result(t); refusalOf(r) != "" || up.count("issue_refund") != 1 {
		t.Errorf("a call on the session with other headers: %v, %d runs", r, up.count("issue_refund"))
	}
}

// TestSharedStdioUpstream_SessionIsBoundToItsSubject: with one process per
// subject, a session names its subject's process; another subject naming it
// gets 404 and nothing runs in that process.
func TestSharedStdioUpstream_SessionIsBoundToItsSubject(t *testing.T) {
	_, url, _ := newSharedGatewayServer(t, Config{Guard: newGuard(t)})
	alice := newRawClient(t, url, http.Header{"Authorization": {"Bearer alice"}})
	alice.mustInitialize()
	mallory := newRawClient(t, url, http.Header{"Authorization": {"Bearer mallory"}})
	mallory.mustInitialize() // her own session: she is an identified caller
	mallory.sid = alice.sid
	args := map[string]any{"order_id": "o-9"}
	checkNotFound(t, "mallory's call on alice's session", mallory.call("issue_refund", args))
	// Had it run, alice's call would be its replay.
	if r := alice.call("issue_refund", args).result(t); refusalOf(r) != "" || replayed(r) {
		t.Errorf("alice's call after the hijack attempt: %v, want a first run", r)
	}
}

// confirmSniffer passes a gateway's answers through and reports the IDs of
// the gateway's own questions in them: what an attacker who reads the
// traffic or a log learns.
type confirmSniffer struct {
	http.ResponseWriter
	ids chan string
}

var confirmIDPattern = regexp.MustCompile(`"` + confirmIDPrefix + `[0-9a-f]+"`)

func (s *confirmSniffer) Write(b []byte) (int, error) {
	for _, id := range confirmIDPattern.FindAll(b, -1) {
		select {
		case s.ids <- string(id):
		default:
		}
	}
	return s.ResponseWriter.Write(b)
}

func (s *confirmSniffer) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// heldHuman waits for release before answering with ans.
type heldHuman struct {
	asked   chan struct{}
	release chan struct{}
	once    sync.Once
	ans     mcp.ElicitationResponseAction
}

func (h *heldHuman) Elicit(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.once.Do(func() { close(h.asked) })
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: h.ans}}, nil
}

// TestGateway_ConfirmAnswerFromAnotherSubjectIsRefused: while the gateway's
// own question ("Refund 25 cents on ord_1001?") waits for the victim's
// user, an attacker who knows the session ID and the question's ID answers
// "accept" with their own credential, and with none: 404 each time, the
// answer is not taken, and the victim's decline decides (nothing runs).
func TestGateway_ConfirmAnswerFromAnotherSubjectIsRefused(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	hu, err := NewHTTPUpstream(up.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstream: hu, Guard: newGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig), ConfirmTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ids := make(chan string, 4)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.ServeHTTP(&confirmSniffer{ResponseWriter: w, ids: ids}, r)
	}))
	t.Cleanup(func() {
		hs.Close()
		_ = g.Close(context.Background())
	})
	h := &heldHuman{asked: make(chan struct{}), release: make(chan struct{}), ans: mcp.ElicitationResponseActionDecline}
	victim := victimClient(t, hs.URL, map[string]string{"Authorization": "Bearer alice"}, h)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		var r mcp.CallToolRequest
		r.Params.Name, r.Params.Arguments = "refund", map[string]any{"order_id": "ord_1001", "amount_cents": 25}
		res, err := victim.CallTool(context.Background(), r)
		if err != nil {
			t.Errorf("the victim's call: %v", err)
		}
		done <- res
	}()
	var id string
	select {
	case id = <-ids:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway never asked")
	}
	<-h.asked
	for _, hdr := range []http.Header{{"Authorization": {"Bearer mallory"}}, {}} {
		m := hijacker(t, hs.URL, victim.GetSessionId(), hdr)
		checkNotFound(t, "an accept from "+hdr.Get("Authorization"),
			m.post(`{"jsonrpc":"2.0","id":`+id+`,"result":{"action":"accept"}}`))
	}
	close(h.release)
	res := <-done
	if res == nil {
		t.FailNow()
	}
	if got := refusalReason(res); got != spancontract.RefusalDeclined || len(up.made()) != 0 {
		t.Fatalf("the victim's call: %q (%q), refunds %v; want declined and none", got, text(res), up.made())
	}
}

// credentialless reports whether the value v of header names no caller
// (an Authorization scheme without a credential).
func credentialless(header, v string) bool {
	if header != "Authorization" {
		return strings.TrimSpace(v) == ""
	}
	return len(strings.Fields(v)) < 2
}
