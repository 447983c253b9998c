package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// A response the work produced but that cannot be stored (Response.NotKept:
// an MCP result that does not encode) is recorded as done without a body,
// as one over MaxResponseBytes is: the first caller gets its Result with a
// *ResponseTooLargeError, every duplicate the error, and the work never
// runs again within the window. Its text says the response could not be
// kept, not that it was too large.
func TestGuard_NotKeptResponseIsRecordedAndNeverRerun(t *testing.T) {
	store := &idemkit.MemoryStore{}
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idemkit.NewKey("alice", "refund", []byte(`{"order_id":"o-1"}`), nil)
	runs := 0
	work := func(context.Context) (idemkit.Response, error) {
		runs++
		return idemkit.Response{NotKept: true, WriteID: "re_1"}, nil
	}
	res, err := g.Do(context.Background(), key, work)
	var tl *idemkit.ResponseTooLargeError
	if !errors.As(err, &tl) || res.Outcome != idemkit.OutcomeExecuted || res.WriteID != "re_1" || tl.Result.WriteID != "re_1" {
		t.Fatalf("first call: %+v, %v", res, err)
	}
	for range 3 {
		res, err := g.Do(context.Background(), key, work)
		if !errors.As(err, &tl) || res.Outcome != "" || tl.Size != 0 {
			t.Fatalf("duplicate: %+v, %v", res, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "could not be kept") || !strings.Contains(msg, "the work is done") || strings.Contains(msg, "exceeded") {
			t.Errorf("text %q", msg)
		}
	}
	if runs != 1 {
		t.Fatalf("the work ran %d times", runs)
	}
	rec, err := g.Lookup(context.Background(), key)
	if err != nil || rec.State != idemstore.StateCompleted || rec.Storage != idemstore.StorageDropped || rec.WriteID != "re_1" {
		t.Fatalf("record %+v, %v", rec, err)
	}
	// A tool error that cannot be kept is released, as tool errors are by
	// default: its retry runs again.
	key2, _ := idemkit.NewKey("alice", "refund", []byte(`{"order_id":"o-2"}`), nil)
	failing := func(context.Context) (idemkit.Response, error) {
		runs++
		return idemkit.Response{NotKept: true, IsError: true}, nil
	}
	for range 2 {
		if res, err := g.Do(context.Background(), key2, failing); err != nil || !res.IsError {
			t.Fatalf("tool error: %+v, %v", res, err)
		}
	}
	if runs != 3 {
		t.Fatalf("runs %d", runs)
	}
}
