package downstream

import (
	"context"
	"fmt"
	"net/http"
)

// DefaultHeader is the header Transport and EditRequest set: the name of
// the IETF httpapi draft "The Idempotency-Key HTTP Header Field", which
// Stripe, Adyen and others use.
const DefaultHeader = "Idempotency-Key"

// Transport is an http.RoundTripper that puts the downstream key of the
// call running in a request's context (Key(req.Context())) on the request,
// in Header, and hands it to Base. Use it as an http.Client's Transport
// inside a tool, and build requests with the tool's context
// (http.NewRequestWithContext).
//
//   - Only requests with an unsafe method (POST, PUT, PATCH, DELETE, …) get
//     the header; GET, HEAD, OPTIONS and TRACE are idempotent already.
//   - A request that already carries Header keeps its value: the caller
//     chose a key. A client library that generates its own random keys
//     (stripe-go does, for its retries) must be given the downstream key
//     through its own parameter instead (stripe-go:
//     params.SetIdempotencyKey(key)), or its key wins.
//   - Retries of one request reuse its key: the client's own retry loop
//     (a request made again with the same context) and net/http's, which
//     re-sends a POST on a fresh connection when a reused one fails before
//     answering only because the request carries an Idempotency-Key.
//   - Outside a protected call the request goes out without the header,
//     or, with Require, is refused with an error matching ErrNoCall.
//
// Providers deduplicate for far longer than idemkit's window (Stripe: 24
// hours); the key is the record's, so a deliberate repeat after the window
// reaches them as a new request. A tool that makes several different unsafe
// requests in one call must name each with WithName: a provider answers a
// key reused with other parameters with an error (Stripe: 400
// idempotency_error). It is safe for concurrent use.
type Transport struct {
	// Base sends the requests. Defaults to http.DefaultTransport.
	Base http.RoundTripper
	// Header is the header that carries the key. Defaults to
	// DefaultHeader.
	Header string
	// Require refuses an unsafe request made outside a protected call,
	// with an error matching ErrNoCall, instead of sending it without a
	// key. Defaults to false.
	Require bool
}

// RoundTrip implements http.RoundTripper. It does not modify req: a
// request that gets the header is a shallow clone.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	header := t.Header
	if header == "" {
		header = DefaultHeader
	}
	if safeMethod(req.Method) || req.Header.Get(header) != "" {
		return base.RoundTrip(req)
	}
	key, err := Key(req.Context())
	if err != nil {
		if t.Require {
			closeBody(req)
			return nil, fmt.Errorf("downstream: %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set(header, key)
	return base.RoundTrip(r)
}

// EditRequest sets DefaultHeader on req to the downstream key of the call
// running in ctx, or returns ErrNoCall outside one (req is then left as it
// is). Its signature is that of the request editors generated API clients
// take (oapi-codegen's RequestEditorFn), for clients whose transport
// cannot be replaced. Unlike Transport it sets the header whatever the
// method, and replaces a value already there.
func EditRequest(ctx context.Context, req *http.Request) error {
	key, err := Key(ctx)
	if err != nil {
		return err
	}
	req.Header.Set(DefaultHeader, key)
	return nil
}

func safeMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// closeBody closes a refused request's body, as a RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
