// Package downstream carries a protected call's idempotency past the tool:
// onto the requests it makes to other services, into the IDs of the
// resources it creates, and into markers it leaves where neither works.
// These are the seed article's strategies for tools that cannot be made
// idempotent by the claim alone.
//
// Every helper starts from the running call's downstream key,
// idemkit.Call.IdempotencyKey: the same for every attempt of one record
// (retries, takeovers after a crash, every replica), another for a new
// record (a deliberate repeat after the window). Outside a protected call
// there is no key: the helpers that need one return ErrNoCall, and
// Transport sends requests without the header (or refuses them, with
// Transport.Require).
//
// Forward the key to a provider that deduplicates on it (Stripe, Adyen,
// PayPal, any API following the IETF httpapi Idempotency-Key draft):
//
//	client := &http.Client{Transport: &downstream.Transport{}}
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body) // ctx: the tool's
//	resp, err := client.Do(req) // carries Idempotency-Key: idk_…
//
// Assign the ID before the write, so that "create" becomes an upsert:
//
//	id, err := downstream.ResourceID(ctx, "https://tickets.example.com/tickets")
//	_, err = db.Exec(ctx, `INSERT INTO tickets (id, …) VALUES ($1, …) ON CONFLICT (id) DO NOTHING`, id, …)
//
// Search before creating, with a marker the target keeps:
//
//	m, err := downstream.Marker(ctx)
//	if found := search(m); found != nil { return found }
//	create(body + "\n<!-- " + m + " -->")
//
// A tool that makes several different writes in one call names each, so
// that each gets a key, an ID and a marker of its own (a provider refuses
// one key reused with other parameters):
//
//	customer := downstream.WithName(ctx, "customer")
//	charge := downstream.WithName(ctx, "charge")
package downstream
