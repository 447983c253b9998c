package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/downstream"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
	"github.com/idemkit-mcp/idemkit/internal/dedupapi"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
)

// Two replicas (two Guards, each with its own pool, on one Postgres schema)
// refund through a provider that deduplicates by Idempotency-Key for 24
// hours, on loopback. Every attempt of one record reaches it with one key,
// whichever replica runs it: replica A's attempt hangs after the refund and
// B takes over when its lease lapses; B's attempt fails after the refund
// and A runs it again. The provider moves the money once per record. The
// user's deliberate repeat after the window, on either replica, is a new
// refund.
func TestReplicas_ForwardOneDownstreamKeyPerRecord(t *testing.T) {
	schema := pgtest.Schema(t, pgtest.Pool(t))
	replica := func(clock *storetest.Clock) *idemkit.Guard {
		store, err := pgstore.New(pgtest.Pool(t), &pgstore.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		g, err := idemkit.NewGuard(store, &idemkit.Config{Now: clock.Now, Window: 10 * time.Minute, Lease: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	clock := storetest.NewClock()
	a, b := replica(clock), replica(clock)
	provider := &dedupapi.Server{Now: clock.Now}
	srv := httptest.NewServer(provider)
	defer srv.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &downstream.Transport{Base: base}}
	refund := func(ctx context.Context) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/refunds", strings.NewReader(`{"order":"ord_1001","amount":25000}`))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var r dedupapi.Refund
		return r.ID, json.NewDecoder(resp.Body).Decode(&r)
	}
	ok := func(ctx context.Context) (idemkit.Response, error) {
		id, err := refund(ctx)
		return idemkit.Response{Body: []byte(id), WriteID: id}, err
	}
	ctx := context.Background()

	// A hangs after the refund; B takes over once A's lease has lapsed.
	k := mustKey(t, "alice", "issue_refund", `{"order_id":"ord_1001","amount_cents":25000}`)
	posted, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := a.Do(ctx, k, func(ctx context.Context) (idemkit.Response, error) {
			if _, err := refund(ctx); err != nil {
				return idemkit.Response{}, err
			}
			close(posted)
			<-release
			return idemkit.Response{Body: []byte("late")}, nil
		})
		done <- err
	}()
	<-posted
	if _, err := b.Do(ctx, k, ok); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("B inside A's lease: %v, want in progress", err)
	}
	clock.Advance(31 * time.Second)
	res, err := b.Do(ctx, k, ok)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "re_1" {
		t.Fatalf("B's takeover: %+v %v; want A's refund re_1", res, err)
	}
	close(release)
	if err := <-done; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("A's late finish: %v, want ErrLeaseLost", err)
	}

	// B fails after the refund (the answer was lost); A runs it again.
	k2 := mustKey(t, "alice", "issue_refund", `{"order_id":"ord_1002","amount_cents":500}`)
	if _, err := b.Do(ctx, k2, func(ctx context.Context) (idemkit.Response, error) {
		if _, err := refund(ctx); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{}, errors.New("gateway timeout")
	}); err == nil {
		t.Fatal("B's failing attempt succeeded")
	}
	if res, err := a.Do(ctx, k2, ok); err != nil || res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "re_2" {
		t.Fatalf("A's retry of B's failure: %+v %v; want B's refund re_2", res, err)
	}
	if n := len(provider.Refunds()); n != 2 {
		t.Fatalf("the provider made %d refunds for two records, want 2", n)
	}

	// The user repeats the first refund on purpose, 11 minutes later, on A.
	clock.Advance(11 * time.Minute)
	if res, err := a.Do(ctx, k, ok); err != nil || res.Outcome != idemkit.OutcomeExecuted || res.WriteID != "re_3" {
		t.Fatalf("deliberate repeat after the window: %+v %v; want a new refund re_3", res, err)
	}
	reqs := provider.Requests()
	if len(reqs) != 5 {
		t.Fatalf("provider saw %d requests, want 5: %+v", len(reqs), reqs)
	}
	first, second, repeat := reqs[0].Key, reqs[2].Key, reqs[4].Key
	if reqs[1].Key != first || !reqs[1].Replayed || reqs[3].Key != second || !reqs[3].Replayed ||
		first == "" || first == second || repeat == first || reqs[4].Replayed {
		t.Fatalf("provider saw %+v; want one key per record across replicas, a new one for the repeat", reqs)
	}
}
