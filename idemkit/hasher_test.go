package idemkit_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/clip"
)

func hmacHex(key []byte, s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// The zero Hasher gives the plain forms; a keyed one HMACs, with the key
// and subject hashes in the form WithSubjectHashKey used (so that values
// recorded before stay comparable) and the args and session hashes
// domain-separated. The key changes no stored identity.
func TestHasher_PlainAndKeyedForms(t *testing.T) {
	k, err := idemkit.NewKey("alice@example.com", "refund", []byte(`{"order_id":"ord_1012","amount_cents":250}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var plain hashkey.Hasher
	if plain.Keyed() || plain.KeyHash(k.ID()) != k.Hash() || plain.ArgsHash(k.ArgsHash()) != k.ArgsHash()[:32] ||
		plain.SubjectHash("alice@example.com") != clip.Hash("alice@example.com") {
		t.Errorf("the zero Hasher's hashes are not the plain SHA-256 forms")
	}
	if s := plain.SessionHash("sid-1"); len(s) != 32 || s == clip.Hash("sid-1") || strings.Contains(s, "sid-1") {
		t.Errorf("SessionHash = %q", s)
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	given := []byte(string(key))
	h := hashkey.New(given)
	given[0] = 'X' // NewHasher copied it: this changes nothing
	if !h.Keyed() || h.KeyHash(k.ID()) != hmacHex(key, k.ID()) || h.SubjectHash("alice@example.com") != hmacHex(key, "alice@example.com") {
		t.Errorf("keyed key and subject hashes are not HMAC-SHA-256 of the key ID and the subject")
	}
	if h.ArgsHash(k.ArgsHash()) != hmacHex(key, "idemkit.args.hash\x00"+k.ArgsHash()) || h.SessionHash("sid-1") != hmacHex(key, "mcp.session.id\x00sid-1") {
		t.Errorf("keyed args and session hashes are not the domain-separated HMACs")
	}
	for _, v := range []string{h.KeyHash(k.ID()), h.ArgsHash(k.ArgsHash()), h.SubjectHash("alice@example.com"), h.SessionHash("sid-1")} {
		if len(v) != 32 || v == plain.KeyHash(k.ID()) || v == plain.ArgsHash(k.ArgsHash()) || v == plain.SubjectHash("alice@example.com") {
			t.Errorf("keyed hash %q: want 32 hex characters, none equal to a plain one", v)
		}
	}
	if other := hashkey.New([]byte("another key of the same length!!")); other.KeyHash(k.ID()) == h.KeyHash(k.ID()) {
		t.Error("two keys, one key hash")
	}
	if hashkey.New(nil).Keyed() || hashkey.New([]byte{}).Keyed() {
		t.Error("an empty key is a key")
	}
	k2, _ := idemkit.NewKey("alice@example.com", "refund", []byte(`{"order_id":"ord_1012","amount_cents":250}`), nil)
	if k2.ID() != k.ID() || k2.Fingerprint() != k.Fingerprint() {
		t.Error("the stored identity changed")
	}
}

// Config.HashKey keys the key hash in the Guard's errors and log records;
// a key shorter than MinHashKeyLen is refused, naming the field.
func TestGuard_HashKeyKeysErrorsAndLogs(t *testing.T) {
	if _, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{HashKey: []byte("short")}); err == nil || !strings.Contains(err.Error(), "Config.HashKey") {
		t.Fatalf("NewGuard with a 5-byte hash key: %v, want an error naming Config.HashKey", err)
	}
	hashKey := []byte("0123456789abcdef0123456789abcdef")
	store := &faultyStore{}
	logger, logs := capture()
	g, err := idemkit.NewGuard(store, &idemkit.Config{Logger: logger, HashKey: hashKey})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idemkit.NewKey("alice@example.com", "refund", []byte(`{"order":"o-1"}`), nil)
	keyed := hashkey.New(hashKey).KeyHash(key.ID())

	store.failFinish.Store(true)
	_, err = g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: []byte("x")}, nil })
	var fe *idemkit.FinishError
	if !errors.As(err, &fe) || fe.KeyHash != keyed {
		t.Fatalf("FinishError %v: key hash %q, want the keyed %s", err, fe.KeyHash, keyed)
	}
	store.failFinish.Store(false)
	store.failClaim.Store(true)
	_, claimErr := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, nil })
	for what, text := range map[string]string{"finish error": err.Error(), "claim error": claimErr.Error(), "log": logs.String()} {
		if strings.Contains(text, key.Hash()) || !strings.Contains(text, keyed) {
			t.Errorf("%s %q: want the keyed key hash %s, never the plain %s", what, text, keyed, key.Hash())
		}
	}
}
