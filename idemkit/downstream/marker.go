package downstream

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// markerEncoding is lowercase base32 without padding: letters and digits
// only.
var markerEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Marker returns a short token for search-then-create, for a target that
// neither deduplicates on a key nor lets the tool choose the new item's ID
// (a ticket tracker, a chat channel, a wiki): write it into a field the
// target keeps (a tag, a custom property, a trailing HTML comment), and
// before creating search for it; an item that carries it is the one an
// earlier attempt of this record created. It returns ErrNoCall outside a
// protected call.
//
// Search-then-create races under true concurrency: two writers that search
// at once both find nothing and both create. The claim is what covers it:
// only one attempt of a record runs at a time (a duplicate that arrives
// meanwhile gets the in-progress answer, never a second run), and an
// attempt that takes over after a crash or a lapsed lease searches before
// it creates. What is left is the target's own lag: search an index that
// is updated late (a search service fed asynchronously) and a takeover can
// miss the crashed attempt's item; search where the write is visible at
// once (the item list, a field filter), or wait out the index's lag before
// the takeover creates.
//
// The marker is MarkerFor(Key(ctx)).
func Marker(ctx context.Context) (string, error) {
	key, err := Key(ctx)
	if err != nil {
		return "", err
	}
	return MarkerFor(key), nil
}

// MarkerFor returns the marker of downstream key key: "idk" and 16
// lowercase base32 characters (80 bits) of a SHA-256 of key, 19 characters
// of [a-z2-7] in all. It needs no escaping in a URL, an HTML attribute or
// comment, JSON, Markdown or a query string, and search engines index it
// as one word (no hyphen or underscore for a tokenizer to split on).
func MarkerFor(key string) string {
	sum := sha256.Sum256([]byte("idemkit marker\x00" + key))
	var b strings.Builder
	b.Grow(19)
	b.WriteString("idk")
	b.WriteString(markerEncoding.EncodeToString(sum[:10]))
	return b.String()
}
