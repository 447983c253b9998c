package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// hexKey returns a 64-character hex key, as Key.ID() makes, for record i.
func hexKey(i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "record-%d", i))
	return hex.EncodeToString(sum[:])
}

func mustLookup(t *testing.T, store idemstore.Store, req idemstore.LookupRequest) idemstore.Record {
	t.Helper()
	rec, err := store.Lookup(ctx(t), req)
	if err != nil {
		t.Fatalf("Lookup(%.12s…): %v", req.Key, err)
	}
	return rec
}

func sameTime(a, b time.Time) bool { return a.Equal(b) }

// Lookup reports a record in every state, as it stands, without changing it.
func (s *suite) lookupStates(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	k := hexKey(1)
	if _, err := store.Lookup(c, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()}); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Lookup of a missing key: %v, want ErrNotFound", err)
	}
	t0 := clock.Now()
	claim := func(tok int64) idemstore.ClaimResult {
		t.Helper()
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "refund", Fingerprint: "fp", Token: tok, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	claim(1)

	// In progress.
	rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()})
	if rec.Key != k || rec.Tool != "refund" || rec.Fingerprint != "fp" || rec.State != idemstore.StateInProgress || rec.Attempt != 1 ||
		!sameTime(rec.Started, t0) || !sameTime(rec.LeaseUntil, t0.Add(time.Minute)) || !sameTime(rec.ExpiresAt, t0.Add(10*time.Minute)) ||
		!sameTime(rec.Now, t0) || rec.Body != nil || rec.Note != "" || rec.Error != "" || rec.Expired() || rec.Abandoned() {
		t.Fatalf("in-progress record: %+v", rec)
	}
	// Reading it changed nothing: a duplicate is still busy.
	if cr := claim(2); cr.Status != idemstore.ClaimBusy {
		t.Fatalf("claim after Lookup: %s, want busy", cr.Status)
	}

	// A heartbeat's note, kept until the next one; "" keeps it.
	clock.Advance(10 * time.Second)
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Note: "charged the card", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()})
	if rec.Note != "charged the card" || !sameTime(rec.LeaseUntil, clock.Now().Add(time.Minute)) || !sameTime(rec.Now, clock.Now()) {
		t.Fatalf("after heartbeats: note %q lease until %v (now %v), want the first note and the second lease", rec.Note, rec.LeaseUntil, rec.Now)
	}
	// A stale token's note is refused with its heartbeat.
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 99, Lease: time.Minute, Note: "stale", Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale extend: %v, want ErrLeaseLost", err)
	}

	// Abandoned: in progress past its lease.
	clock.Advance(2 * time.Minute)
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()})
	if rec.State != idemstore.StateInProgress || !rec.Abandoned() || rec.Expired() {
		t.Fatalf("past the lease: state %s abandoned %v expired %v, want in progress, abandoned, not expired", rec.State, rec.Abandoned(), rec.Expired())
	}

	// Released after a failure, with its error text.
	if cr := claim(3); cr.Status != idemstore.ClaimTakenOver || cr.Attempt != 2 {
		t.Fatalf("takeover: %s attempt %d", cr.Status, cr.Attempt)
	}
	if rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); rec.Note != "" || rec.Attempt != 2 {
		t.Fatalf("after a takeover: note %q attempt %d, want the note cleared and attempt 2", rec.Note, rec.Attempt)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 3, Error: "gateway timed out", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()})
	if rec.State != idemstore.StateReleased || rec.Error != "gateway timed out" || rec.Body != nil || rec.WriteID != "" || rec.Expired() {
		t.Fatalf("released record: %+v", rec)
	}

	// The next attempt clears the error; completed with an inline body.
	claim(4)
	if rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); rec.Error != "" || rec.State != idemstore.StateInProgress || rec.Attempt != 3 {
		t.Fatalf("after a takeover of a released record: %+v, want in progress, attempt 3, no error", rec)
	}
	body := []byte(`{"refund":"re_1"}`)
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 4, Succeeded: true,
		Response: idemkit.Response{Body: body, WriteID: "re_1", IsError: true}, Size: int64(len(body)), Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()})
	if rec.State != idemstore.StateCompleted || !bytes.Equal(rec.Body, body) || rec.WriteID != "re_1" || !rec.IsError ||
		rec.Storage != idemstore.StorageInline || rec.Size != int64(len(body)) || rec.Attempt != 3 {
		t.Fatalf("completed record: %+v", rec)
	}
	if rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); rec.Body != nil {
		t.Fatalf("Lookup without Body returned %d body bytes", len(rec.Body))
	}

	// Expired but not swept: reported as it is.
	clock.Advance(time.Hour)
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()})
	if !rec.Expired() || rec.State != idemstore.StateCompleted || !bytes.Equal(rec.Body, body) || !sameTime(rec.Now, clock.Now()) {
		t.Fatalf("expired record: expired %v state %s body %q", rec.Expired(), rec.State, rec.Body)
	}

	// The store's own clock when Now is zero.
	rec = mustLookup(t, store, idemstore.LookupRequest{Key: k})
	if d := time.Since(rec.Now); rec.Now.IsZero() || d > time.Hour || d < -time.Hour {
		t.Fatalf("Lookup without Now: Now = %v, want the store's clock", rec.Now)
	}
}

// Lookup returns external and dropped bodies as stored.
func (s *suite) lookupBodies(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	external := bytes.Repeat([]byte("0123456789"), 10_000)
	for i, tc := range []struct {
		storage idemstore.Storage
		body    []byte
		want    []byte
	}{
		{idemstore.StorageExternal, external, external},
		{idemstore.StorageDropped, nil, nil},
		{idemstore.StorageInline, []byte{}, []byte{}},
	} {
		k := hexKey(100 + i)
		if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "report", Token: 1, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 1, Succeeded: true, Response: idemkit.Response{Body: tc.body},
			Storage: tc.storage, Size: 123_456, Now: clock.Now()}); err != nil {
			t.Fatal(err)
		}
		rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()})
		if rec.Storage != tc.storage || rec.Size != 123_456 || !bytes.Equal(rec.Body, tc.want) || (tc.want != nil) != (rec.Body != nil) {
			t.Fatalf("storage %d: record storage %d size %d body %d bytes (nil %v), want %d bytes", tc.storage, rec.Storage, rec.Size, len(rec.Body), rec.Body == nil, len(tc.want))
		}
	}
}

// List filters by state, tool and key prefix, and pages by key.
func (s *suite) list(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	const n = 40
	type want struct {
		key   string
		tool  string
		state idemstore.RecordState
	}
	var all []want
	for i := range n {
		k := hexKey(i)
		tool := []string{"refund", "send", "charge"}[i%3]
		if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: tool, Token: int64(i + 1), Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
			t.Fatal(err)
		}
		w := want{k, tool, idemstore.StateInProgress}
		switch i % 4 {
		case 1:
			w.state = idemstore.StateCompleted
			if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: int64(i + 1), Succeeded: true, Response: idemkit.Response{Body: []byte("body"), WriteID: "w"}, Size: 4, Now: clock.Now()}); err != nil {
				t.Fatal(err)
			}
		case 2:
			w.state = idemstore.StateReleased
			if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: int64(i + 1), Error: "boom", Now: clock.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, w)
	}
	slices.SortFunc(all, func(a, b want) int { return strings.Compare(a.key, b.key) })

	// pages lists with req, page after page, and checks every page.
	pages := func(req idemstore.ListRequest) []idemstore.Record {
		t.Helper()
		var got []idemstore.Record
		for range n + 1 {
			page, err := store.List(c, req)
			if err != nil {
				t.Fatalf("List(%+v): %v", req, err)
			}
			if len(page) > req.PageSize() {
				t.Fatalf("List returned %d records, over its limit of %d", len(page), req.PageSize())
			}
			for _, r := range page {
				if r.Body != nil {
					t.Fatalf("List returned a body for %.12s…", r.Key)
				}
				if !sameTime(r.Now, clock.Now()) {
					t.Fatalf("List record Now = %v, want %v", r.Now, clock.Now())
				}
			}
			got = append(got, page...)
			if len(page) < req.PageSize() {
				return got
			}
			req.After = page[len(page)-1].Key
		}
		t.Fatalf("List kept returning full pages")
		return nil
	}
	check := func(name string, req idemstore.ListRequest, keep func(want) bool) {
		t.Helper()
		got := pages(req)
		var exp []want
		for _, w := range all {
			if keep(w) {
				exp = append(exp, w)
			}
		}
		if len(got) != len(exp) {
			t.Fatalf("%s: %d records, want %d", name, len(got), len(exp))
		}
		for i := range got {
			if got[i].Key != exp[i].key || got[i].Tool != exp[i].tool || got[i].State != exp[i].state {
				t.Fatalf("%s: record %d = %.12s… %s %s, want %.12s… %s %s", name, i, got[i].Key, got[i].Tool, got[i].State, exp[i].key, exp[i].tool, exp[i].state)
			}
		}
	}
	check("all, pages of 7", idemstore.ListRequest{Limit: 7, Now: clock.Now()}, func(want) bool { return true })
	check("all, one page", idemstore.ListRequest{Limit: idemstore.MaxListLimit + 5, Now: clock.Now()}, func(want) bool { return true })
	check("in flight", idemstore.ListRequest{State: idemstore.StateInProgress, Limit: 3, Now: clock.Now()}, func(w want) bool { return w.state == idemstore.StateInProgress })
	check("released", idemstore.ListRequest{State: idemstore.StateReleased, Now: clock.Now()}, func(w want) bool { return w.state == idemstore.StateReleased })
	check("tool", idemstore.ListRequest{Tool: "send", Limit: 4, Now: clock.Now()}, func(w want) bool { return w.tool == "send" })
	check("tool and state", idemstore.ListRequest{Tool: "refund", State: idemstore.StateCompleted, Now: clock.Now()},
		func(w want) bool { return w.tool == "refund" && w.state == idemstore.StateCompleted })
	target := all[n/2].key
	check("key hash", idemstore.ListRequest{KeyPrefix: target[:32], Now: clock.Now()}, func(w want) bool { return w.key == target })
	check("key prefix", idemstore.ListRequest{KeyPrefix: target[:1], Limit: 2, Now: clock.Now()}, func(w want) bool { return w.key[0] == target[0] })
	check("full key", idemstore.ListRequest{KeyPrefix: target, Now: clock.Now()}, func(w want) bool { return w.key == target })
	check("no match", idemstore.ListRequest{KeyPrefix: "zz", Now: clock.Now()}, func(want) bool { return false })
	check("after", idemstore.ListRequest{After: all[n-3].key, Now: clock.Now()}, func(w want) bool { return w.key > all[n-3].key })

	if recs, err := store.List(c, idemstore.ListRequest{Now: clock.Now()}); err != nil || len(recs) != n || n > idemstore.DefaultListLimit {
		t.Fatalf("List with the default limit: %d records, %v; want all %d", len(recs), err, n)
	}
	if _, err := store.List(c, idemstore.ListRequest{State: 9}); err == nil {
		t.Fatal("List with an unknown state succeeded")
	}
	// The record fields List returns are Lookup's.
	recs, err := store.List(c, idemstore.ListRequest{KeyPrefix: target, Now: clock.Now()})
	if err != nil || len(recs) != 1 {
		t.Fatalf("List one key: %v %v", recs, err)
	}
	one := mustLookup(t, store, idemstore.LookupRequest{Key: target, Now: clock.Now()})
	if !recordsEqual(recs[0], one) {
		t.Fatalf("List record %+v differs from Lookup's %+v", recs[0], one)
	}
}

func recordsEqual(a, b idemstore.Record) bool {
	return a.Key == b.Key && a.Tool == b.Tool && a.Fingerprint == b.Fingerprint && a.State == b.State && a.Attempt == b.Attempt && a.Generation == b.Generation &&
		a.Started.Equal(b.Started) && a.LeaseUntil.Equal(b.LeaseUntil) && a.ExpiresAt.Equal(b.ExpiresAt) && a.Now.Equal(b.Now) &&
		a.WriteID == b.WriteID && a.IsError == b.IsError && a.Storage == b.Storage && a.Size == b.Size &&
		a.Error == b.Error && a.Note == b.Note && bytes.Equal(a.Body, b.Body)
}

// Guard.Lookup reports a call by its Key: the heartbeat's note while it
// runs, the body a duplicate would get once it is done, the failure text
// after a failure; never another request's body.
func (s *suite) guardLookup(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	k := key(t, "s", "export", `{"month":"2030-01"}`)
	if _, err := g.Lookup(ctx(t), k); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Lookup before any call: %v, want ErrNotFound", err)
	}
	noted, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, func(ctx context.Context) (idemkit.Response, error) {
			if err := idemkit.CallFromContext(ctx).HeartbeatNote(ctx, "3 of 12 pages"); err != nil {
				return idemkit.Response{}, err
			}
			close(noted)
			<-release
			return idemkit.Response{Body: []byte("exported"), WriteID: "exp-1"}, nil
		})
		done <- err
	}()
	<-noted
	rec, err := g.Lookup(ctx(t), k)
	if err != nil || rec.State != idemstore.StateInProgress || rec.Note != "3 of 12 pages" || rec.Key != k.ID() || rec.Tool != "export" {
		t.Fatalf("Lookup while running: %+v %v", rec, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec, err = g.Lookup(ctx(t), k)
	if err != nil || rec.State != idemstore.StateCompleted || string(rec.Body) != "exported" || rec.WriteID != "exp-1" {
		t.Fatalf("Lookup when done: %+v %v", rec, err)
	}

	// An explicit key sent with other arguments: a mismatch, no body.
	ka := key(t, "s", "refund", `{"order":"o-1","idempotency_key":"intent-7"}`)
	kb := key(t, "s", "refund", `{"order":"o-2","idempotency_key":"intent-7"}`)
	mustDo(t, g, ka, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("o-1's refund")}, nil
	})
	if rec, err := g.Lookup(ctx(t), kb); !errors.Is(err, idemkit.ErrKeyMismatch) || rec.Body != nil {
		t.Fatalf("Lookup with another request's arguments: %v (body %q), want ErrKeyMismatch and no body", err, rec.Body)
	}
	if rec, err := g.Lookup(ctx(t), ka); err != nil || string(rec.Body) != "o-1's refund" {
		t.Fatalf("Lookup with the original arguments: %+v %v", rec, err)
	}
	if _, err := g.Lookup(ctx(t), idemkit.Key{}); !errors.Is(err, idemkit.ErrInvalidKey) {
		t.Fatalf("Lookup of the zero Key: %v, want ErrInvalidKey", err)
	}

	// After a failure: released, with the work's error text, cut at a
	// character boundary.
	kf := key(t, "s", "send", `{"to":"#ops"}`)
	long := strings.Repeat("é", idemstore.MaxErrorBytes) // 2 bytes each
	_, err = g.Do(ctx(t), kf, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{}, errors.New("x" + long)
	})
	if err == nil {
		t.Fatal("failing work returned no error")
	}
	rec, err = g.Lookup(ctx(t), kf)
	if err != nil || rec.State != idemstore.StateReleased {
		t.Fatalf("Lookup after a failure: %+v %v", rec, err)
	}
	if want := "x" + strings.Repeat("é", (idemstore.MaxErrorBytes-1)/2); rec.Error != want {
		t.Fatalf("stored error text: %d bytes %q…, want the first %d bytes that end on a character", len(rec.Error), rec.Error[:min(20, len(rec.Error))], len(want))
	}
}

// A note longer than MaxNoteBytes is cut at a character boundary.
func (s *suite) noteBounded(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	k := key(t, "s", "export", `{}`)
	note := "ab" + strings.Repeat("😂", idemstore.MaxNoteBytes) // 4 bytes each
	mustDo(t, g, k, func(ctx context.Context) (idemkit.Response, error) {
		if err := idemkit.CallFromContext(ctx).HeartbeatNote(ctx, note); err != nil {
			return idemkit.Response{}, err
		}
		rec, err := g.Lookup(ctx, k)
		if err != nil {
			return idemkit.Response{}, err
		}
		if want := "ab" + strings.Repeat("😂", (idemstore.MaxNoteBytes-2)/4); rec.Note != want {
			t.Errorf("stored note: %d bytes, want %d (the longest prefix that ends on a character)", len(rec.Note), len(want))
		}
		return idemkit.Response{}, nil
	})
}
