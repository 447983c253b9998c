package downstream_test

import (
	"context"
	"errors"
	"html"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/downstream"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
)

var uuidV5Form = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// tickets is a target that creates by ID: an insert of an existing ID is a
// no-op (ON CONFLICT DO NOTHING).
type tickets struct {
	mu   sync.Mutex
	rows map[string]string
}

func (ts *tickets) insert(id, title string) (created bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.rows == nil {
		ts.rows = map[string]string{}
	}
	if _, ok := ts.rows[id]; ok {
		return false
	}
	ts.rows[id] = title
	return true
}

// With the ID assigned before the write, the attempt that takes over after
// a crash (the ticket was created, the outcome not recorded) upserts onto
// the same row; a deliberate repeat after the window is a new ticket.
func TestResourceID_CreateBecomesUpsert(t *testing.T) {
	clock := storetest.NewClock()
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Now: clock.Now, Window: 10 * time.Minute})
	var ts tickets
	k := mustKey(t, "alice", `{"title":"printer on fire"}`)
	var ids []string
	create := func(crash bool) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			id, err := downstream.ResourceID(ctx, "https://tickets.example.com/tickets")
			if err != nil {
				return idemkit.Response{}, err
			}
			ids = append(ids, id)
			ts.insert(id, "printer on fire")
			if crash {
				return idemkit.Response{}, errors.New("crashed after the insert")
			}
			return idemkit.Response{WriteID: id}, nil
		}
	}
	_, _ = g.Do(context.Background(), k, create(true))
	res, err := g.Do(context.Background(), k, create(false))
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || len(ts.rows) != 1 || ids[0] != ids[1] || !uuidV5Form.MatchString(ids[0]) {
		t.Fatalf("takeover: %+v %v, %d tickets, ids %q; want one ticket, one version-5 UUID", res, err, len(ts.rows), ids)
	}
	clock.Advance(11 * time.Minute)
	if _, err := g.Do(context.Background(), k, create(false)); err != nil || len(ts.rows) != 2 || ids[2] == ids[0] {
		t.Fatalf("deliberate repeat: %v, %d tickets, ids %q; want a second ticket", err, len(ts.rows), ids)
	}
	// Namespaces and names separate the IDs of one call.
	_, _ = g.Do(context.Background(), mustKey(t, "alice", `{"other":1}`), func(ctx context.Context) (idemkit.Response, error) {
		a, _ := downstream.ResourceID(ctx, "https://tickets.example.com/tickets")
		b, _ := downstream.ResourceID(ctx, "https://tickets.example.com/comments")
		c, _ := downstream.ResourceID(downstream.WithName(ctx, "second"), "https://tickets.example.com/tickets")
		key, _ := downstream.Key(ctx)
		if a == b || a == c || a != downstream.ResourceIDFor(key, "https://tickets.example.com/tickets") {
			t.Errorf("IDs %s %s %s; want three distinct IDs, ResourceIDFor agreeing", a, b, c)
		}
		return idemkit.Response{}, nil
	})
	if _, err := downstream.ResourceID(context.Background(), "x"); !errors.Is(err, downstream.ErrNoCall) {
		t.Fatalf("outside a call: %v, want ErrNoCall", err)
	}
}

// tracker is a target with neither keys nor client IDs: it assigns its own
// IDs and can only be searched.
type tracker struct {
	mu     sync.Mutex
	issues []string
}

func (tr *tracker) search(s string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, body := range tr.issues {
		if strings.Contains(body, s) {
			return i + 1
		}
	}
	return 0
}

func (tr *tracker) create(body string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.issues = append(tr.issues, body)
	return len(tr.issues)
}

// Search-then-create with the marker: an attempt that takes over after a
// crash finds the crashed attempt's issue and does not create another;
// the duplicate that arrives while the first attempt runs never gets to
// search (in progress).
func TestMarker_SearchThenCreate(t *testing.T) {
	clock := storetest.NewClock()
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Now: clock.Now, Lease: 30 * time.Second})
	var tr tracker
	k := mustKey(t, "alice", `{"title":"printer on fire"}`)
	created := make(chan struct{})
	open := func(hang chan struct{}) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			m, err := downstream.Marker(ctx)
			if err != nil {
				return idemkit.Response{}, err
			}
			id := tr.search(m)
			if id == 0 {
				id = tr.create("The printer is on fire.\n<!-- " + m + " -->")
			}
			if hang != nil {
				close(created)
				<-hang // crashed: never heartbeats, never finishes
				return idemkit.Response{}, errors.New("late")
			}
			return idemkit.Response{WriteID: "issue-" + string(rune('0'+id))}, nil
		}
	}
	hang := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), k, open(hang))
		done <- err
	}()
	<-created
	if _, err := g.Do(context.Background(), k, open(nil)); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate while the first attempt runs: %v, want in progress", err)
	}
	clock.Advance(31 * time.Second)
	res, err := g.Do(context.Background(), k, open(nil))
	close(hang)
	<-done
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "issue-1" || len(tr.issues) != 1 {
		t.Fatalf("takeover: %+v %v, %d issues; want the crashed attempt's issue found, not a second", res, err, len(tr.issues))
	}
}

// The marker is short and needs no escaping anywhere it is embedded.
func TestMarker_Form(t *testing.T) {
	seen := map[string]bool{}
	for _, key := range []string{"idk_a", "idk_b", "idk_a.0123456789ab", idemkit.DownstreamKey(strings.Repeat("f", 64), 7)} {
		m := downstream.MarkerFor(key)
		if !regexp.MustCompile(`^idk[a-z2-7]{16}$`).MatchString(m) || url.QueryEscape(m) != m || url.PathEscape(m) != m || html.EscapeString(m) != m {
			t.Fatalf("MarkerFor(%q) = %q; want idk and 16 base32 characters, nothing to escape", key, m)
		}
		if seen[m] || downstream.MarkerFor(key) != m {
			t.Fatalf("MarkerFor(%q) = %q: not unique or not deterministic", key, m)
		}
		seen[m] = true
	}
	if _, err := downstream.Marker(context.Background()); !errors.Is(err, downstream.ErrNoCall) {
		t.Fatalf("outside a call: %v, want ErrNoCall", err)
	}
}
