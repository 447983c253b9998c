package idemkit_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// A refund tool wrapped by a Guard runs once; the duplicate gets the first
// call's response back, marked as a replay.
func ExampleGuard_Do() {
	guard, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		panic(err)
	}
	refunds := 0
	refund := func(ctx context.Context) (idemkit.Response, error) {
		refunds++
		// Forward idemkit.CallFromContext(ctx).IdempotencyKey() to the
		// payment gateway so that it deduplicates too.
		return idemkit.Response{Body: []byte(`{"refund_id":"re_1"}`), WriteID: "re_1"}, nil
	}
	for _, args := range []string{`{"order":"o-1","amount_cents":500}`, `{"amount_cents":500.0, "order":"o-1"}`} {
		key, err := idemkit.NewKey("user-42", "issue_refund", []byte(args), nil)
		if err != nil {
			panic(err)
		}
		res, err := guard.Do(context.Background(), key, refund)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s %s attempt=%d\n", res.Outcome, res.Body, res.Attempt)
	}
	fmt.Println("refunds:", refunds)
	// Output:
	// executed {"refund_id":"re_1"} attempt=1
	// replayed {"refund_id":"re_1"} attempt=1
	// refunds: 1
}

// A duplicate that arrives while the first call runs gets an error written
// for the model: the work is in flight, do not retry, call the status tool.
func ExampleInProgressError() {
	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{
		Tools: map[string]idemkit.ToolConfig{"issue_refund": {StatusTool: "get_refund_status"}},
	})
	key, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-1"}`), nil)
	_, _ = guard.Do(context.Background(), key, func(ctx context.Context) (idemkit.Response, error) {
		_, err := guard.Do(ctx, key, nil) // a duplicate, while the first runs
		var ip *idemkit.InProgressError
		if errors.As(err, &ip) {
			fmt.Println(err)
		}
		return idemkit.Response{Body: []byte(`{}`)}, nil
	})
	// Output:
	// The issue_refund call with these arguments is already in progress. It has not failed: the work is in flight. Do not call it again now, and do not retry it with the same arguments. Call get_refund_status to check its status and get its result.
}

// Reusing an explicit idempotency key with different arguments is refused.
func ExampleMismatchError() {
	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	work := func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: []byte(`{}`)}, nil }
	k1, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-1","idempotency_key":"intent-7"}`), nil)
	k2, _ := idemkit.NewKey("user-42", "issue_refund", []byte(`{"order":"o-2","idempotency_key":"intent-7"}`), nil)
	_, _ = guard.Do(context.Background(), k1, work)
	_, err := guard.Do(context.Background(), k2, work)
	fmt.Println(errors.Is(err, idemkit.ErrKeyMismatch))
	// Output:
	// true
}
