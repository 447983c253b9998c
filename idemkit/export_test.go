package idemkit

// UsePlainContexts makes g build the work's and the finish's contexts with
// the standard library instead of its attempt, for the benchmark that
// compares the two.
func UsePlainContexts(g *Guard) { g.plainContexts = true }

// CanonicalJSON is canonicalJSON, for the external tests: the canonical
// form NewKey hashes (canonjson.Transform, errors wrapping
// ErrInvalidArguments).
func CanonicalJSON(doc []byte) ([]byte, error) { return canonicalJSON(doc) }

// Bytes reports what s's records take, as its MaxBytes counts it.
func (s *MemoryStore) Bytes() int64 { return s.bytesUsed() }
