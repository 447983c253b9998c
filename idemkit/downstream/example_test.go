package downstream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/downstream"
)

// A tool that creates a ticket assigns its ID before the write, from the
// call's downstream key: the attempt that runs again after a failure (the
// ticket was written, the answer lost) writes the same ID, and the insert
// is an upsert by construction.
func ExampleResourceID() {
	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	key, _ := idemkit.NewKey("alice", "open_ticket", []byte(`{"title":"printer on fire"}`), nil)
	tickets := map[string]string{} // the target: INSERT … ON CONFLICT (id) DO NOTHING

	openTicket := func(fail bool) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			id, err := downstream.ResourceID(ctx, "https://tickets.example.com/tickets")
			if err != nil {
				return idemkit.Response{}, err // not a protected call: refuse, do not guess
			}
			if _, ok := tickets[id]; !ok {
				tickets[id] = "printer on fire"
			}
			if fail {
				return idemkit.Response{}, errors.New("the answer was lost")
			}
			return idemkit.Response{Body: []byte(`{"ticket":"` + id + `"}`), WriteID: id}, nil
		}
	}
	_, err := guard.Do(context.Background(), key, openTicket(true))
	fmt.Println("first attempt:", err)
	res, _ := guard.Do(context.Background(), key, openTicket(false))
	fmt.Println("retry:", res.Outcome, "tickets:", len(tickets))

	// The ID of a known downstream key, as any UUID library computes it
	// (Python: uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, namespace), key)).
	fmt.Println(downstream.ResourceIDFor("idk_example", "https://tickets.example.com/tickets"))
	// Output:
	// first attempt: the answer was lost
	// retry: takeover tickets: 1
	// 14affd73-5f09-5ce6-9453-a2adb2d1be8d
}

// Search-then-create: the marker goes into a field the target keeps (here
// a trailing HTML comment in an issue's body), and the tool searches for it
// before creating. The takeover after a crash finds the crashed attempt's
// issue instead of opening a second one.
func ExampleMarker() {
	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	key, _ := idemkit.NewKey("alice", "open_issue", []byte(`{"title":"printer on fire"}`), nil)
	var issues []string // the target: it assigns its own IDs, and can be searched

	openIssue := func(fail bool) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			m, err := downstream.Marker(ctx)
			if err != nil {
				return idemkit.Response{}, err
			}
			for i, body := range issues {
				if strings.Contains(body, m) {
					return idemkit.Response{WriteID: fmt.Sprint("issue ", i+1)}, nil // found: an earlier attempt made it
				}
			}
			issues = append(issues, "The printer is on fire.\n<!-- "+m+" -->")
			if fail {
				return idemkit.Response{}, errors.New("crashed after creating")
			}
			return idemkit.Response{WriteID: fmt.Sprint("issue ", len(issues))}, nil
		}
	}
	_, _ = guard.Do(context.Background(), key, openIssue(true))
	res, _ := guard.Do(context.Background(), key, openIssue(false))
	fmt.Println(res.Outcome, res.WriteID, "of", len(issues))
	fmt.Println(downstream.MarkerFor("idk_example"))
	// Output:
	// takeover issue 1 of 1
	// idkv7k6gn25fbhr3glj
}
