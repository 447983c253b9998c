// Package argpolicy applies a tool's key policy to its canonical
// arguments: fields excluded by JSON Pointer at any depth, and timestamp
// fields rounded (truncated) to a granularity, before the arguments are
// hashed into the call's idempotency key (idemkit.KeyOptions Exclude and
// Round). The SDK adapters (internal/mcpcall) and the gateway's
// configuration (cmd/idemkit/internal/gatewayconfig) validate their
// settings with Compile at setup, so that a malformed pointer is an error
// there, never a policy silently ignored at call time.
//
// # Pointers
//
// An entry that starts with "/" is a JSON Pointer (RFC 6901): tokens
// separated by "/", with "~1" for "/" and "~0" for "~" in a token. On an
// object a token names a member, matched byte for byte (canonjson has
// already refused two names of one object that differ only in letter
// case, so exactly one member can match). On an array a token is an index
// ("0", "12": decimal, no leading zero) and "*" matches every element:
// "*" is not an array index in RFC 6901, so the extension gives no
// RFC 6901 pointer a second meaning ("*" on an object is still the member
// named "*"). "-" (RFC 6901's element after the last) never matches.
// Where an exclusion and a rounding both reach one value (through "*"),
// the exclusion wins.
// An entry without a leading "/" is a top-level member name, taken as it
// is (no "~" escapes): the form Exclude always had.
//
// # Rounding
//
// A rounded field must be an RFC 3339 date-time string (time.RFC3339Nano:
// "2026-12-02T02:25:07.5+01:00"; "t" and "z" in either case; digits past
// nanoseconds are dropped; a leap second, ":60", is refused, as
// time.Parse refuses it) or null. It is converted to UTC and
// truncated to the granularity, which must divide 24 hours (1s, 1m, 5m,
// 15m, 1h, 24h...), so that the boundaries are the UTC clock's; the key
// hashes the truncated instant, written in RFC 3339 in UTC. Truncation,
// not rounding to the nearest: 10:00:59 and 10:00:00 share a key with a
// 1m granularity, 10:00:59 and 10:01:00 do not. Any fixed grid has such
// boundaries, so two retries that straddle one get two keys: when that is
// not acceptable, exclude the field instead. A field present with any
// other value (a number, an unparseable string, an object) is an error:
// hashing it raw would give every retry a new key while the operator
// believes it is rounded. The handler always sees the value as sent.
package argpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxTokens bounds a pointer's tokens: canonjson refuses documents nested
// deeper than 128 levels, so a longer pointer never matches.
const MaxTokens = 128

// Day is the largest granularity: one that divides it keeps the UTC
// clock's boundaries.
const Day = 24 * time.Hour

// Policy is a compiled key policy. A nil *Policy changes nothing. It is
// immutable, safe for concurrent use.
type Policy struct {
	root  *node
	names []string // non-nil when the policy is top-level excludes only
}

// node is one pointer position. Children are by token; each is the "*"
// child, for array elements.
type node struct {
	children map[string]*node
	each     *node
	exclude  bool
	round    time.Duration
	ptr      string // the entry that set exclude or round, for errors
}

// ParsePointer splits an RFC 6901 JSON Pointer into its unescaped tokens.
// It refuses "" (the whole document), a pointer without a leading "/", a
// "~" not followed by "0" or "1", invalid UTF-8 and more than MaxTokens
// tokens.
func ParsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, errors.New("the empty JSON Pointer names the whole arguments object; a key policy names fields inside it")
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("JSON Pointer %q does not start with \"/\"", p)
	}
	if !utf8.ValidString(p) {
		return nil, fmt.Errorf("JSON Pointer %q is not valid UTF-8", p)
	}
	raw := strings.Split(p[1:], "/")
	if len(raw) > MaxTokens {
		return nil, fmt.Errorf("JSON Pointer %q has %d tokens; arguments nest at most %d levels", p, len(raw), MaxTokens)
	}
	for i, t := range raw {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("JSON Pointer %q: \"~\" must be followed by 0 or 1 (write ~0 for \"~\" and ~1 for \"/\")", p)
			}
		}
		if strings.IndexByte(t, '~') >= 0 {
			raw[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
		}
	}
	return raw, nil
}

// tokens returns an entry's tokens: a pointer's, or a plain name as the
// one top-level token.
func tokens(entry string) ([]string, error) {
	if strings.HasPrefix(entry, "/") {
		return ParsePointer(entry)
	}
	if !utf8.ValidString(entry) {
		return nil, fmt.Errorf("field name %q is not valid UTF-8", entry)
	}
	return []string{entry}, nil
}

// CheckGranularity reports whether d may be a rounding granularity: over
// zero and dividing 24 hours.
func CheckGranularity(d time.Duration) error {
	if d <= 0 || Day%d != 0 {
		return fmt.Errorf("the granularity %s must be positive and divide 24h evenly (such as 1s, 1m, 5m, 15m, 1h or 24h), so that its boundaries are the UTC clock's", d)
	}
	return nil
}

// Compile validates and compiles exclude (pointers or top-level names)
// and round (pointer or top-level name -> granularity). It refuses a
// malformed pointer, a bad granularity, an entry listed both as excluded
// and rounded, and two rounded pointers that may address one value with
// different granularities. It returns nil for an empty policy.
func Compile(exclude []string, round map[string]time.Duration) (*Policy, error) {
	if len(exclude) == 0 && len(round) == 0 {
		return nil, nil
	}
	p := &Policy{root: &node{}}
	simple := len(round) == 0
	for _, e := range exclude {
		toks, err := tokens(e)
		if err != nil {
			return nil, fmt.Errorf("exclude: %w", err)
		}
		if len(toks) != 1 {
			simple = false
		}
		n := p.root.at(toks)
		n.exclude, n.ptr = true, e
	}
	type rounded struct {
		entry string
		toks  []string
		d     time.Duration
	}
	var rs []rounded
	for e, d := range round {
		toks, err := tokens(e)
		if err != nil {
			return nil, fmt.Errorf("round: %w", err)
		}
		if err := CheckGranularity(d); err != nil {
			return nil, fmt.Errorf("round %q: %w", e, err)
		}
		n := p.root.at(toks)
		if n.exclude {
			return nil, fmt.Errorf("round %q: the field is excluded too (%q); exclude it or round it, not both", e, n.ptr)
		}
		if n.round != 0 && n.round != d {
			return nil, fmt.Errorf("round %q: %q names the same field with another granularity", e, n.ptr)
		}
		n.round, n.ptr = d, e
		rs = append(rs, rounded{e, toks, d})
	}
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if rs[i].d != rs[j].d && mayOverlap(rs[i].toks, rs[j].toks) {
				a, b := rs[i].entry, rs[j].entry
				if a > b {
					a, b = b, a
				}
				return nil, fmt.Errorf("round: %q and %q may name the same array element with different granularities (%s and %s); use one granularity", a, b, rs[i].d, rs[j].d)
			}
		}
	}
	if simple {
		p.names = make([]string, 0, len(exclude))
		for _, e := range exclude {
			toks, _ := tokens(e)
			p.names = append(p.names, toks[0])
		}
	}
	return p, nil
}

// mayOverlap reports whether two pointers may address one value: equal
// length, and each token equal or one of them "*".
func mayOverlap(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && a[i] != "*" && b[i] != "*" {
			return false
		}
	}
	return true
}

func (n *node) at(toks []string) *node {
	for _, t := range toks {
		var next *node
		if t == "*" {
			if n.each == nil {
				n.each = &node{}
			}
			next = n.each
			// "*" is also the member named "*" of an object.
		}
		if n.children == nil {
			n.children = make(map[string]*node)
		}
		c := n.children[t]
		if c == nil {
			if next != nil {
				c = next // one node for both readings of "*"
			} else {
				c = &node{}
			}
			n.children[t] = c
		}
		n = c
	}
	return n
}

// TopLevelNames returns the excluded names when the policy is top-level
// excludes only (no rounding, no nested pointer), and false otherwise:
// such a policy is applied by canonjson's Omit, as Exclude always was.
func (p *Policy) TopLevelNames() ([]string, bool) {
	if p == nil {
		return nil, true
	}
	return p.names, p.names != nil
}

// Apply appends to dst the canonical document canon (canonjson's form,
// which it must be) with the policy applied: excluded members and
// elements left out, rounded fields replaced by their truncated instants.
// The result is canonical too. An error names the field's path and says
// what it must be.
func (p *Policy) Apply(dst, canon []byte) ([]byte, error) {
	if p == nil {
		return append(dst, canon...), nil
	}
	w := walker{doc: canon, out: dst}
	end, err := w.value(0, []*node{p.root})
	if err != nil {
		return nil, err
	}
	if end != len(canon) {
		return nil, fmt.Errorf("argpolicy: unexpected canonical form at offset %d", end)
	}
	return w.out, nil
}

type walker struct {
	doc  []byte
	out  []byte
	path []step  // down to the value being written, for errors
	kids []*node // scratch for child sets, a stack
}

// step is one level of walker.path: a member name (a sub-slice of the
// document, or decoded) or, when name is nil, an array index.
type step struct {
	name []byte
	idx  int
}

// value writes the value at doc[i] under the nodes that apply to it and
// returns the offset after it.
func (w *walker) value(i int, nodes []*node) (int, error) {
	if len(nodes) == 0 {
		end := SkipValue(w.doc, i)
		if end < 0 {
			return 0, fmt.Errorf("argpolicy: unexpected canonical form at offset %d", i)
		}
		w.out = append(w.out, w.doc[i:end]...)
		return end, nil
	}
	for _, n := range nodes {
		if n.round != 0 {
			return w.round(i, n)
		}
	}
	if i >= len(w.doc) {
		return 0, fmt.Errorf("argpolicy: unexpected end at offset %d", i)
	}
	switch w.doc[i] {
	case '{':
		return w.object(i, nodes)
	case '[':
		return w.array(i, nodes)
	}
	return w.value(i, nil)
}

func (w *walker) object(i int, nodes []*node) (int, error) {
	w.out = append(w.out, '{')
	first := true
	i++
	for i < len(w.doc) && w.doc[i] != '}' {
		nameEnd := SkipString(w.doc, i)
		if nameEnd < 0 || nameEnd >= len(w.doc) || w.doc[nameEnd] != ':' {
			return 0, fmt.Errorf("argpolicy: unexpected canonical form at offset %d", i)
		}
		name, err := decodeName(w.doc[i:nameEnd])
		if err != nil {
			return 0, err
		}
		base := len(w.kids)
		excluded := false
		for _, n := range nodes {
			if c := n.children[string(name)]; c != nil {
				excluded = excluded || c.exclude
				w.kids = append(w.kids, c)
			}
		}
		if i, err = w.member(nameEnd+1, w.doc[i:nameEnd+1], step{name: name}, excluded, &first, base); err != nil {
			return 0, err
		}
	}
	if i >= len(w.doc) {
		return 0, errors.New("argpolicy: unterminated object")
	}
	w.out = append(w.out, '}')
	return i + 1, nil
}

func (w *walker) array(i int, nodes []*node) (int, error) {
	w.out = append(w.out, '[')
	first := true
	i++
	var idx [20]byte
	for k := 0; i < len(w.doc) && w.doc[i] != ']'; k++ {
		token := strconv.AppendInt(idx[:0], int64(k), 10)
		base := len(w.kids)
		excluded := false
		for _, n := range nodes {
			if c := n.children[string(token)]; c != nil {
				excluded = excluded || c.exclude
				w.kids = append(w.kids, c)
			}
			if c := n.each; c != nil {
				excluded = excluded || c.exclude
				w.kids = append(w.kids, c)
			}
		}
		var err error
		if i, err = w.member(i, nil, step{idx: k}, excluded, &first, base); err != nil {
			return 0, err
		}
	}
	if i >= len(w.doc) {
		return 0, errors.New("argpolicy: unterminated array")
	}
	w.out = append(w.out, ']')
	return i + 1, nil
}

// member passes over the member value at doc[at] of an object or array
// (lead is what precedes it in the output: the object member's name and
// colon): skipped when excluded, otherwise written after a comma unless
// *first, under the policy nodes w.kids[base:], at path step s. It drops
// those nodes and returns where the next member starts.
func (w *walker) member(at int, lead []byte, s step, excluded bool, first *bool, base int) (int, error) {
	var end int
	if excluded {
		if end = SkipValue(w.doc, at); end < 0 {
			return 0, fmt.Errorf("argpolicy: unexpected canonical form at offset %d", at)
		}
	} else {
		if !*first {
			w.out = append(w.out, ',')
		}
		*first = false
		w.out = append(w.out, lead...)
		w.path = append(w.path, s)
		var err error
		end, err = w.value(at, w.kids[base:])
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return 0, err
		}
	}
	w.kids = w.kids[:base]
	if end < len(w.doc) && w.doc[end] == ',' {
		end++
	}
	return end, nil
}

// round writes the truncated instant of the timestamp at doc[i].
func (w *walker) round(i int, n *node) (int, error) {
	end := SkipValue(w.doc, i)
	if end < 0 {
		return 0, fmt.Errorf("argpolicy: unexpected canonical form at offset %d", i)
	}
	v := w.doc[i:end]
	if string(v) == "null" {
		w.out = append(w.out, v...)
		return end, nil
	}
	t, ok := parseTimestamp(v)
	if !ok {
		return 0, &TimestampError{Path: w.pointer(), Granularity: n.round, Value: clip(v, 40)}
	}
	w.out = append(w.out, '"')
	w.out = Truncate(t, n.round).AppendFormat(w.out, time.RFC3339Nano)
	w.out = append(w.out, '"')
	return end, nil
}

// Truncate returns t in UTC truncated to d (which divides 24 hours): the
// instant a rounded field is hashed as.
func Truncate(t time.Time, d time.Duration) time.Time {
	return t.UTC().Truncate(d)
}

func parseTimestamp(v []byte) (time.Time, bool) {
	if len(v) < 2 || v[0] != '"' {
		return time.Time{}, false
	}
	var s string
	if bytes.IndexByte(v, '\\') < 0 {
		s = string(v[1 : len(v)-1])
	} else if err := json.Unmarshal(v, &s); err != nil {
		return time.Time{}, false
	}
	if strings.ContainsAny(s, "tz") {
		// RFC 3339 allows "t" and "z" in lower case; time.Parse does not.
		s = strings.ToUpper(s)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// pointer returns the JSON Pointer of the value being written.
func (w *walker) pointer() string {
	var b strings.Builder
	for _, s := range w.path {
		b.WriteByte('/')
		if s.name == nil {
			b.WriteString(strconv.Itoa(s.idx))
		} else {
			b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(string(s.name)))
		}
	}
	return b.String()
}

// TimestampError reports a field to round that is not an RFC 3339
// timestamp.
type TimestampError struct {
	Path        string        // the field's JSON Pointer in the arguments
	Granularity time.Duration // the rounding configured for it
	Value       string        // the value, cut to 40 bytes
}

func (e *TimestampError) Error() string {
	return fmt.Sprintf("the %q argument must be an RFC 3339 timestamp such as \"2026-12-02T10:15:00Z\" (this tool rounds it to %s for the idempotency key), got %s",
		e.Path, e.Granularity, e.Value)
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// decodeName decodes a canonical member name, without a copy when it has
// no escapes. The result is never nil.
func decodeName(quoted []byte) ([]byte, error) {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, nil
	}
	var s string
	err := json.Unmarshal(quoted, &s)
	return append([]byte{}, s...), err
}

// SkipString returns the offset just past the JSON string starting at
// b[i] ('"'), or -1.
func SkipString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// SkipValue returns the offset just past the canonical JSON value starting
// at b[i], or -1.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i = SkipString(b, i)
			if i < 0 {
				return -1
			}
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return -1
}
