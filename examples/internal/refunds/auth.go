package refunds

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

type subjectKey struct{}

// SubjectFromContext returns the subject Authenticate found for the request,
// or "". It is the instrument.WithSubject function of the protected server:
// idempotency keys are scoped by it.
func SubjectFromContext(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// DemoTokens are the bearer tokens the demo accepts.
var DemoTokens = map[string]string{
	"demo-token-alice": "user:alice",
	"demo-token-bob":   "user:bob",
}

// Authenticate is the HTTP middleware that names the caller. A request
// with "Authorization: Bearer <token>" for a known token runs with its
// subject in the context; an unknown token gets 401; a request without the
// header runs without a subject, so that the protected server falls back to
// scoping keys by MCP session (see instrument.WithSubject), which does not
// catch a duplicate replayed on a new session.
//
// A real server verifies a signed token (an OAuth access token, a JWT) and
// uses its sub claim; the static table stands in for that here.
func Authenticate(tokens map[string]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		if h == "" {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := strings.CutPrefix(h, "Bearer ")
		subject := tokens[strings.TrimSpace(token)]
		if !ok || subject == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="refund-desk"`)
			http.Error(w, "unknown bearer token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, subject)))
	})
}

// ParseTokens parses "token=subject,token=subject".
func ParseTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		token, subject, ok := strings.Cut(part, "=")
		if !ok || token == "" || subject == "" {
			return nil, fmt.Errorf("refunds: token %q: want token=subject", part)
		}
		out[token] = subject
	}
	return out, nil
}

// FormatTokens is the inverse of ParseTokens, sorted by token.
func FormatTokens(tokens map[string]string) string {
	keys := make([]string, 0, len(tokens))
	for k := range tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tokens[k]
	}
	return strings.Join(parts, ",")
}
