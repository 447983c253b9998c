package refunds

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/idemkit-mcp/idemkit/instrument/mcpgo"
)

// DemoTokens are the bearer tokens the demo accepts.
var DemoTokens = map[string]string{
	"demo-token-alice": "user:alice",
	"demo-token-bob":   "user:bob",
}

// Realm is the realm of the servers' WWW-Authenticate challenge.
const Realm = "refund-desk"

// The servers authenticate callers with "Authorization: Bearer <token>"
// against a static table (a real server verifies a signed token, an OAuth
// access token or a JWT, and uses its sub claim). A known token's subject
// scopes the idempotency keys (instrument.WithSubject with the SDK
// adapter's TokenSubject); an unknown token gets 401; a request without the
// header runs without a subject, and its calls are scoped by their MCP
// session, which the servers validate (stateful Streamable HTTP): a
// duplicate replayed on a new session after a reconnect is then not caught.

// mcpgoAuth is the mcp-go server's authentication: mcpgo.RequireBearerToken.
func mcpgoAuth(tokens map[string]string, next http.Handler) http.Handler {
	verify := func(_ context.Context, token string, _ *http.Request) (string, error) {
		if s := tokens[token]; s != "" {
			return s, nil
		}
		return "", mcpgo.ErrInvalidToken
	}
	return mcpgo.RequireBearerToken(verify, &mcpgo.BearerOptions{Optional: true, Realm: Realm})(next)
}

// gosdkAuth is the go-sdk server's authentication: the SDK's own
// auth.RequireBearerToken for requests that carry a token, none for the
// others (as mcpgoAuth with Optional).
func gosdkAuth(tokens map[string]string, next http.Handler) http.Handler {
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if s := tokens[token]; s != "" {
			return &auth.TokenInfo{UserID: s, Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	required := auth.RequireBearerToken(verify, nil)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		required.ServeHTTP(w, r)
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
