package downstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/downstream"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
	"github.com/idemkit-mcp/idemkit/internal/dedupapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// provider starts the fake payment provider on loopback; its clock is
// clock's.
func provider(t *testing.T, clock *storetest.Clock) (*dedupapi.Server, string) {
	t.Helper()
	p := &dedupapi.Server{Now: clock.Now}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func newClient(t *testing.T, rt http.RoundTripper) *http.Client {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	if rt == nil {
		rt = &downstream.Transport{Base: base}
	}
	return &http.Client{Transport: rt}
}

func mustKey(t *testing.T, subject, args string) idemkit.Key {
	t.Helper()
	k, err := idemkit.NewKey(subject, "issue_refund", []byte(args), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// postRefund POSTs a refund with ctx and returns the provider's refund ID.
func postRefund(ctx context.Context, c *http.Client, url, body string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/refunds", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r dedupapi.Refund
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	return r.ID, nil
}

// Through Transport, every attempt of one record reaches a provider that
// deduplicates for 24 hours with one key, and it moves the money once: a
// retry after a released failure (the answer was lost after the refund), a
// takeover after a lapsed lease. A deliberate repeat after idemkit's window
// reaches it as the new request it is.
func TestTransport_ProviderSeesOneKeyPerRecord(t *testing.T) {
	clock := storetest.NewClock()
	p, url := provider(t, clock)
	client := newClient(t, nil)
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Now: clock.Now, Window: 10 * time.Minute, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k := mustKey(t, "alice", `{"order_id":"ord_1001","amount_cents":25000}`)
	refund := func(loseAnswer bool) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			id, err := postRefund(ctx, client, url, `{"order":"ord_1001","amount":25000}`)
			if err != nil {
				return idemkit.Response{}, err
			}
			if loseAnswer {
				return idemkit.Response{}, errors.New("the answer was lost")
			}
			return idemkit.Response{Body: []byte(id), WriteID: id}, nil
		}
	}
	if _, err := g.Do(ctx, k, refund(true)); err == nil {
		t.Fatal("the failing attempt succeeded")
	}
	res, err := g.Do(ctx, k, refund(false))
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "re_1" || len(p.Refunds()) != 1 {
		t.Fatalf("retry after the release: %+v %v, %d refunds; want a takeover answered re_1 and one refund", res, err, len(p.Refunds()))
	}

	// The user asks again 11 minutes later, on purpose.
	clock.Advance(11 * time.Minute)
	res, err = g.Do(ctx, k, refund(false))
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || res.WriteID != "re_2" || len(p.Refunds()) != 2 {
		t.Fatalf("deliberate repeat after the window: %+v %v, %d refunds; want a new refund re_2", res, err, len(p.Refunds()))
	}

	// A worker hangs after the refund; the takeover after its lease lapses
	// forwards its key.
	k2 := mustKey(t, "alice", `{"order_id":"ord_1002","amount_cents":100}`)
	posted, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, k2, func(ctx context.Context) (idemkit.Response, error) {
			if _, err := postRefund(ctx, client, url, `{"order":"ord_1002"}`); err != nil {
				return idemkit.Response{}, err
			}
			close(posted)
			<-release
			return idemkit.Response{}, errors.New("late")
		})
		done <- err
	}()
	<-posted
	clock.Advance(31 * time.Second)
	res, err = g.Do(ctx, k2, refund(false))
	close(release)
	<-done
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "re_3" || len(p.Refunds()) != 3 {
		t.Fatalf("takeover after a lapsed lease: %+v %v, %d refunds; want the hung attempt's refund re_3", res, err, len(p.Refunds()))
	}

	reqs := p.Requests()
	if len(reqs) != 5 || reqs[0].Key != reqs[1].Key || !reqs[1].Replayed || reqs[2].Key == reqs[0].Key || reqs[2].Replayed ||
		reqs[3].Key != reqs[4].Key || !reqs[4].Replayed || reqs[0].Key == "" {
		t.Fatalf("provider saw %+v; want one key per record, the later attempts replayed", reqs)
	}
}

// net/http re-sends a POST on a fresh connection when a reused one closes
// before answering only when the request carries an Idempotency-Key: with
// Transport, the provider made the refund, lost the answer, and the
// client's own retry got the refund back under the same key. Without it,
// the tool gets an error for a refund that happened.
func TestTransport_ClientRetryReusesTheKey(t *testing.T) {
	clock := storetest.NewClock()
	p := &dedupapi.Server{Now: clock.Now, DropFirstAnswer: true}
	srv := httptest.NewServer(p)
	defer srv.Close()
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Now: clock.Now})
	ctx := context.Background()

	for _, tc := range []struct {
		name      string
		transport bool
	}{{"with Transport", true}, {"without", false}} {
		t.Run(tc.name, func(t *testing.T) {
			base := http.DefaultTransport.(*http.Transport).Clone()
			defer base.CloseIdleConnections()
			var rt http.RoundTripper = base
			if tc.transport {
				rt = &downstream.Transport{Base: base}
			}
			client := &http.Client{Transport: rt}
			// Warm a keep-alive connection, so that the POST reuses it.
			resp, err := client.Get(srv.URL + "/health")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			before := len(p.Refunds())
			k := mustKey(t, "alice", `{"order_id":"`+tc.name+`"}`)
			res, err := g.Do(ctx, k, func(ctx context.Context) (idemkit.Response, error) {
				id, err := postRefund(ctx, client, srv.URL, `{"order":"x"}`)
				return idemkit.Response{Body: []byte(id), WriteID: id}, err
			})
			made := len(p.Refunds()) - before
			if tc.transport {
				if err != nil || made != 1 || res.WriteID != p.Refunds()[len(p.Refunds())-1].ID {
					t.Fatalf("with the key: %+v %v, %d refunds made; want the client's retry to get the one refund back", res, err, made)
				}
				reqs := p.Requests()
				last, prev := reqs[len(reqs)-1], reqs[len(reqs)-2]
				if !last.Replayed || last.Key != prev.Key || last.Key == "" {
					t.Fatalf("the provider saw %+v then %+v; want the retry replayed under the first request's key", prev, last)
				}
				return
			}
			if err == nil || made != 1 {
				t.Fatalf("without the key: %+v %v, %d refunds; want an error for the refund that happened (net/http does not retry the POST)", res, err, made)
			}
		})
	}
}

// Transport adds the header only where it means something, and only when
// it has a key; a request's own key wins.
func TestTransport_HeaderRules(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.Header.Get("X-Request-Key"))
		mu.Unlock()
	}))
	defer srv.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &downstream.Transport{Base: base, Header: "X-Request-Key"}}
	send := func(ctx context.Context, method, key string) error {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		if key != "" {
			req.Header.Set("X-Request-Key", key)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		if key != "" && req.Header.Get("X-Request-Key") != key {
			t.Errorf("RoundTrip modified the caller's request")
		}
		return err
	}
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	var callKey string
	_, err := g.Do(context.Background(), mustKey(t, "s", `{}`), func(ctx context.Context) (idemkit.Response, error) {
		callKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE", "GET", "HEAD"} {
			if err := send(ctx, m, ""); err != nil {
				return idemkit.Response{}, err
			}
		}
		return idemkit.Response{}, send(ctx, "POST", "chosen-by-caller")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(context.Background(), "POST", ""); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST " + callKey, "PUT " + callKey, "PATCH " + callKey, "DELETE " + callKey, "GET ", "HEAD ", "POST chosen-by-caller", "POST "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the server saw\n%q\nwant\n%q", got, want)
	}

	// Require refuses an unsafe request outside a call, before it leaves.
	strict := &http.Client{Transport: &downstream.Transport{Base: base, Require: true}}
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	if _, err := strict.Do(req); !errors.Is(err, downstream.ErrNoCall) {
		t.Fatalf("Require outside a call: %v, want ErrNoCall", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("the refused request reached the server: %q", got)
	}
}

// EditRequest has the shape of a generated client's request editor.
func TestEditRequest(t *testing.T) {
	var editor func(ctx context.Context, req *http.Request) error = downstream.EditRequest
	req, _ := http.NewRequest("POST", "http://127.0.0.1/", nil)
	if err := editor(context.Background(), req); !errors.Is(err, downstream.ErrNoCall) || req.Header.Get(downstream.DefaultHeader) != "" {
		t.Fatalf("outside a call: %v, header %q", err, req.Header.Get(downstream.DefaultHeader))
	}
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	_, err := g.Do(context.Background(), mustKey(t, "s", `{}`), func(ctx context.Context) (idemkit.Response, error) {
		if err := editor(ctx, req); err != nil {
			return idemkit.Response{}, err
		}
		if got := req.Header.Get(downstream.DefaultHeader); got != idemkit.CallFromContext(ctx).IdempotencyKey() || got == "" {
			t.Errorf("header %q, want the call's key", got)
		}
		return idemkit.Response{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Names give each write of a call its own key, the same on every attempt.
func TestWithName_KeysPerWriteStableAcrossAttempts(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	k := mustKey(t, "s", `{"customer":"c1"}`)
	var attempts [][3]string
	for i := range 2 {
		_, _ = g.Do(context.Background(), k, func(ctx context.Context) (idemkit.Response, error) {
			var a [3]string
			a[0], _ = downstream.Key(ctx)
			a[1], _ = downstream.Key(downstream.WithName(ctx, "customer"))
			a[2], _ = downstream.Key(downstream.WithName(ctx, "charge"))
			attempts = append(attempts, a)
			if i == 0 {
				return idemkit.Response{}, errors.New("fail the first attempt")
			}
			return idemkit.Response{}, nil
		})
	}
	a, b := attempts[0], attempts[1]
	if a != b || a[0] == a[1] || a[1] == a[2] || !strings.HasPrefix(a[1], a[0]+".") {
		t.Fatalf("attempt keys %q and %q; want one set, three distinct keys, names suffixing the call's key", a, b)
	}
	if _, err := downstream.Key(context.Background()); !errors.Is(err, downstream.ErrNoCall) {
		t.Fatalf("Key outside a call: %v", err)
	}
}
