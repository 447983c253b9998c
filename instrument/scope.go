package instrument

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/spancontract"
)

// sessionScopePrefix starts the scope of a call scoped by its session. The
// NUL byte keeps it apart from any subject a WithSubject function returns.
const sessionScopePrefix = "\x00session:"

// scope sets the namespace a call's key lives in, and whether the call can
// be scoped to a caller at all (see WithSubject for the rule).
func (in *Instrumenter) scope(ctx context.Context, call *ToolCall, st *callState) {
	if in.cfg.subject != nil {
		if s := in.cfg.subject(ctx); s != "" {
			st.scope, st.scoped, st.hasSubject = s, true, true
			return
		}
	}
	switch {
	case call.Local:
		st.scope, st.scoped = "", true
	case call.SessionID != "":
		st.scope, st.scoped = sessionScopePrefix+call.SessionID, true
	default:
		st.scope, st.scoped = "", in.cfg.unscoped == UnscopedShare
	}
}

// maxCachedSubjects bounds the subject hash cache; past it, hashes are
// computed per call.
const maxCachedSubjects = 8192

// hashSubject returns the idemkit.subject.hash of a scope.
func (in *Instrumenter) hashSubject(scope string) string {
	if v, ok := in.subjects.Load(scope); ok {
		return v.(string)
	}
	var h string
	if in.cfg.subjectKey == nil {
		h = idemkit.ShortHash(scope)
	} else {
		h = in.shortMAC(scope)
	}
	if in.nsubjects.Load() < maxCachedSubjects {
		if _, loaded := in.subjects.LoadOrStore(scope, h); !loaded {
			in.nsubjects.Add(1)
		}
	}
	return h
}

// keyHash returns the idemkit.key.hash of key: the plain SHA-256 prefix of
// the key ID, or, with WithSubjectHashKey, an HMAC of it under the same key,
// so that a span reader who guesses a subject and arguments cannot confirm
// the guess from the key hash either.
func (in *Instrumenter) keyHash(key idemkit.Key) string {
	if in.cfg.subjectKey == nil {
		return key.Hash()
	}
	return in.shortMAC(key.ID())
}

// shortMAC returns the first spancontract.HashLen hex characters of the
// HMAC-SHA-256 of s under the WithSubjectHashKey key.
func (in *Instrumenter) shortMAC(s string) string {
	mac := hmac.New(sha256.New, in.cfg.subjectKey)
	mac.Write([]byte(s))
	return hex.EncodeToString(mac.Sum(nil)[:spancontract.HashLen/2])
}

// explicitKey returns the explicit idempotency key sent in params._meta, or
// "". Errors wrap idemkit.ErrInvalidKey.
func explicitKey(meta map[string]any) (string, error) {
	if len(meta) == 0 {
		return "", nil
	}
	var (
		key   string
		found bool
	)
	for _, name := range [...]string{KeyMetaKey, KeyArgument} {
		v, ok := meta[name]
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: _meta %q must be a string", idemkit.ErrInvalidKey, name)
		}
		if found && s != key {
			return "", fmt.Errorf("%w: _meta %q and %q carry two different idempotency keys", idemkit.ErrInvalidKey, KeyMetaKey, KeyArgument)
		}
		key, found = s, true
	}
	if found {
		if err := idemkit.ValidateExplicitKey(key); err != nil {
			return "", err
		}
	}
	return key, nil
}
