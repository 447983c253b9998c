package downstream

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
)

// namespaceURL is RFC 9562's namespace ID for URLs,
// 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
var namespaceURL = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// ResourceID returns the ID for the resource the call running in ctx
// creates, before it creates it: the same on every attempt of the record,
// so that an insert keyed on it ("ON CONFLICT (id) DO NOTHING", a PUT to
// /tickets/{id}) is an upsert by construction and the second attempt a
// no-op. namespace names the kind of resource, conventionally a URL
// ("https://tickets.example.com/tickets"); one call gets unrelated IDs in
// two namespaces. It returns ErrNoCall outside a protected call.
//
// The ID is ResourceIDFor(Key(ctx), namespace).
func ResourceID(ctx context.Context, namespace string) (string, error) {
	key, err := Key(ctx)
	if err != nil {
		return "", err
	}
	return ResourceIDFor(key, namespace), nil
}

// ResourceIDFor returns the resource ID of downstream key key (Key,
// idemkit.DownstreamKey) in namespace, a UUID in its lowercase hyphenated
// form: RFC 9562 version 5 (SHA-1, name-based), named key within the
// namespace ID that is itself the version-5 UUID of namespace in the URL
// namespace. Any UUID library computes the same:
//
//	uuid.NewSHA1(uuid.NewSHA1(uuid.NameSpaceURL, []byte(namespace)), []byte(key)) // github.com/google/uuid
//	uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, namespace), key)                     # Python
func ResourceIDFor(key, namespace string) string {
	ns := uuidV5(namespaceURL, namespace)
	return formatUUID(uuidV5(ns, key))
}

// uuidV5 returns the RFC 9562 version 5 UUID of name in namespace ns.
func uuidV5(ns [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // variant 10 (RFC 9562)
	return u
}

func formatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
