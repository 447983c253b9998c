// Package canonjson writes the canonical form of a JSON document: the
// bytes idemkit hashes into a call's key (idemkit.NewKey) and the bytes the
// Collector's dup processor compares the arguments of other
// instrumentations' tool spans by. Both sides import this one package, so
// that a call the middleware keys as two different calls is never grouped
// as one by the processor. It depends on the standard library only.
//
// The canonical form is RFC 8785 (JCS) with one deliberate deviation:
// numbers are canonicalised by their exact decimal value, not by the
// IEEE-754 double nearest to it.
//
// RFC 8785 reads every number as a double, so 9007199254740992 and
// 9007199254740993, 12345678901234567890 and 12345678901234567891, or 0
// and 1e-400 canonicalise alike: two different order IDs would share one
// key, and the second refund would be answered with the first one's
// result. A false merge loses a write; a missed merge only shows up as a
// visible duplicate. So a number here is written in ECMAScript's
// Number::toString form (as JCS writes doubles) of its exact decimal
// digits: 1, 1.0, 1e0 and 10e-1 all become 1, and 100 and 1e2 become 100,
// as in JCS, while different exact values stay different. For every number
// whose exact value is a double's shortest form (all integers up to 2^53,
// and what JSON encoders print for doubles), the output is RFC 8785's byte
// for byte; idemkit's FuzzCanonicalJSON checks that against a JCS library.
//
// It refuses what would make two different documents canonicalise alike,
// or one document mean two things: invalid UTF-8, unpaired surrogate
// escapes, duplicate member names, and two member names of one object that
// are equal under Unicode case folding (ErrCaseVariantNames). Go's
// encoding/json matches member names to struct fields case-insensitively,
// the last one winning, so {"order_id":"a","Order_Id":"b"} is validated by
// its exact names and read by a Go handler as order_id "b": one document
// that a schema check and the code behind it read differently. Folding is
// encoding/json's (bytes.EqualFold on the decoded names). Names are compared
// within one object, at any depth.
//
// The canonicaliser streams: it writes canonical bytes straight into its
// writer (or a buffer, for Transform), sorting an object's members by
// their names, then canonicalising each value from the input in that
// order. Its memory is the members of the objects being written (24 bytes
// each) and the decoded names that hold escapes, not a tree of the
// document. It bounds nesting at MaxDepth levels and a number's decimal
// exponent at ±MaxExponent.
package canonjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects. An object's members
// are scanned once per enclosing object, so the bound also bounds the work.
const MaxDepth = 128

// MaxExponent bounds a number's decimal exponent: a number beyond it is
// refused, since writing it out would take that many digits' work.
const MaxExponent = 1_000_000_000

// ErrCaseVariantNames is matched by the error for an object with two member
// names equal under Unicode case folding but not byte for byte
// ({"order_id":…,"Order_Id":…}).
var ErrCaseVariantNames = errors.New("canonjson: two member names differ only in letter case")

// Transform returns the canonical form of the JSON document doc (RFC 8785,
// numbers by exact decimal value). It is the form Write writes with no
// Options.
func Transform(doc []byte) ([]byte, error) {
	c := canonicalizer{doc: doc}
	c.w.buf = make([]byte, 0, len(doc))
	if err := c.run(); err != nil {
		return nil, err
	}
	return c.w.buf, nil
}

// Options tune Write.
type Options struct {
	// Omit names members of a top-level object left out of the output.
	// They are still validated (and their names still count for the case
	// folding check).
	Omit []string
	// Take names one member of a top-level object left out of the output
	// whose value Write returns: "" for none. (idemkit takes the explicit
	// idempotency key out of the arguments this way.)
	Take string
}

// Write writes the canonical form of doc to w, as Transform returns it,
// with the members opts names left out of a top-level object, through a
// buffer of at most 4 KiB. It returns the raw value of the member
// opts.Take names (a sub-slice of doc, valid JSON), or nil when there is
// none. It returns the document's error, or else w's first error; on an
// error, part of the canonical form may have been written.
func Write(w io.Writer, doc []byte, opts Options) (taken []byte, err error) {
	c := canonicalizer{doc: doc, field: opts.Take, exclude: opts.Omit}
	c.w = canonWriter{w: w, buf: make([]byte, 0, min(4096, len(doc)+64))}
	if err := c.run(); err != nil {
		return nil, err
	}
	if c.w.err != nil {
		return nil, c.w.err
	}
	return c.taken, nil
}

// initialMembers is the capacity of the member stack, allocated with the
// first object: most documents never grow it.
const initialMembers = 8

// canonWriter receives canonical bytes: into w, through buf, when w is set;
// else into buf.
type canonWriter struct {
	w    io.Writer
	err  error // w's first error
	buf  []byte
	mute int // > 0: validate only, write nothing
}

func (w *canonWriter) write(b []byte) {
	if w.mute > 0 {
		return
	}
	if w.w != nil && len(w.buf)+len(b) > cap(w.buf) {
		w.flush()
		if len(b) > cap(w.buf) {
			w.send(b)
			return
		}
	}
	w.buf = append(w.buf, b...)
}

func (w *canonWriter) writeByte(c byte) {
	if w.mute > 0 {
		return
	}
	if w.w != nil && len(w.buf) == cap(w.buf) {
		w.flush()
	}
	w.buf = append(w.buf, c)
}

func (w *canonWriter) writeString(s string) {
	if w.mute > 0 {
		return
	}
	if w.w != nil && len(w.buf)+len(s) > cap(w.buf) {
		w.flush()
	}
	w.buf = append(w.buf, s...)
}

func (w *canonWriter) flush() {
	if w.w != nil && len(w.buf) > 0 {
		w.send(w.buf)
		w.buf = w.buf[:0]
	}
}

// send writes b to w.w, keeping the first error.
func (w *canonWriter) send(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// member is an object member during canonicalisation: offsets into the
// document (or, for a name with escapes, into canonicalizer.names).
type member struct {
	name, nameLen int32 // the decoded name
	quoted        int32 // the name's opening quote in the document
	val, end      int32 // the value's span in the document
	flags         uint8
}

const (
	memberEscaped  uint8 = 1 << iota // the name is in names, decoded
	memberStripped                   // left out of the output (top level)
)

// canonicalizer writes the canonical form of doc.
type canonicalizer struct {
	doc     []byte
	w       canonWriter
	members []member // a stack: the members of the objects being written
	names   []byte   // decoded names that had escapes, a stack too
	folds   []foldEntry
	depth   int

	// Top-level stripping (Write): field is the member taken out, "" for
	// none; exclude are members left out.
	field   string
	exclude []string
	taken   []byte
}

type canonError struct {
	msg  string
	off  int
	kind error // ErrCaseVariantNames, or nil
}

func (e *canonError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

// Is reports whether target is the error's kind.
func (e *canonError) Is(target error) bool { return e.kind != nil && target == e.kind }

func (c *canonicalizer) fail(off int, format string, args ...any) error {
	return &canonError{msg: fmt.Sprintf(format, args...), off: off}
}

// run writes the canonical form of the whole document.
func (c *canonicalizer) run() error {
	if len(c.doc) > 1<<31-1 {
		return errors.New("the document is over 2 GiB")
	}
	i := c.ws(0)
	if i == len(c.doc) {
		return c.fail(i, "no JSON value")
	}
	end, err := c.value(i)
	if err != nil {
		return err
	}
	if end = c.ws(end); end != len(c.doc) {
		return c.fail(end, "unexpected %s after the JSON value", quoteByte(c.doc[end]))
	}
	c.w.flush()
	return nil
}

func quoteByte(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return strconv.QuoteRune(rune(b))
	}
	return fmt.Sprintf("byte 0x%02x", b)
}

func (c *canonicalizer) ws(i int) int {
	for i < len(c.doc) {
		switch c.doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value writes the value at c.doc[i] (not whitespace) and returns the
// offset after it.
func (c *canonicalizer) value(i int) (int, error) {
	if i >= len(c.doc) {
		return 0, c.fail(i, "unexpected end of JSON")
	}
	switch b := c.doc[i]; {
	case b == '{':
		return c.object(i)
	case b == '[':
		return c.array(i)
	case b == '"':
		end, escaped, err := c.scanString(i)
		if err != nil {
			return 0, err
		}
		if escaped {
			c.emitEscapedString(i, end)
		} else {
			c.w.write(c.doc[i:end]) // already canonical
		}
		return end, nil
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number(i)
	case b == 't':
		return c.literal(i, "true")
	case b == 'f':
		return c.literal(i, "false")
	case b == 'n':
		return c.literal(i, "null")
	}
	return 0, c.fail(i, "unexpected %s", quoteByte(c.doc[i]))
}

func (c *canonicalizer) literal(i int, lit string) (int, error) {
	if !bytes.HasPrefix(c.doc[i:], []byte(lit)) {
		return 0, c.fail(i, "invalid literal (want %s)", lit)
	}
	c.w.writeString(lit)
	return i + len(lit), nil
}

func (c *canonicalizer) array(i int) (int, error) {
	if c.depth++; c.depth > MaxDepth {
		return 0, c.fail(i, "arrays and objects nested deeper than %d levels", MaxDepth)
	}
	c.w.writeByte('[')
	i = c.ws(i + 1)
	if i < len(c.doc) && c.doc[i] == ']' {
		c.w.writeByte(']')
		c.depth--
		return i + 1, nil
	}
	for {
		end, err := c.value(i)
		if err != nil {
			return 0, err
		}
		i = c.ws(end)
		if i >= len(c.doc) {
			return 0, c.fail(i, "unterminated array")
		}
		switch c.doc[i] {
		case ',':
			c.w.writeByte(',')
			i = c.ws(i + 1)
		case ']':
			c.w.writeByte(']')
			c.depth--
			return i + 1, nil
		default:
			return 0, c.fail(i, "expected ',' or ']' in an array, found %s", quoteByte(c.doc[i]))
		}
	}
}

func (c *canonicalizer) object(i int) (int, error) {
	if c.depth++; c.depth > MaxDepth {
		return 0, c.fail(i, "arrays and objects nested deeper than %d levels", MaxDepth)
	}
	top := c.depth == 1 && (c.field != "" || len(c.exclude) > 0)
	if c.members == nil {
		c.members = make([]member, 0, initialMembers)
	}
	base, namesBase := len(c.members), len(c.names)
	i = c.ws(i + 1)
	if i < len(c.doc) && c.doc[i] == '}' {
		c.w.writeString("{}")
		c.depth--
		return i + 1, nil
	}
	// First pass: the members' names and value spans.
	for {
		if i >= len(c.doc) || c.doc[i] != '"' {
			return 0, c.fail(i, "expected a member name")
		}
		nameEnd, escaped, err := c.scanString(i)
		if err != nil {
			return 0, err
		}
		m := member{quoted: int32(i)}
		if escaped {
			off := len(c.names)
			c.names = c.decodeString(i, nameEnd, c.names)
			m.name, m.nameLen, m.flags = int32(off), int32(len(c.names)-off), memberEscaped
		} else {
			m.name, m.nameLen = int32(i+1), int32(nameEnd-i-2)
		}
		i = c.ws(nameEnd)
		if i >= len(c.doc) || c.doc[i] != ':' {
			return 0, c.fail(i, "expected ':' after a member name")
		}
		i = c.ws(i + 1)
		end, err := c.skip(i)
		if err != nil {
			return 0, err
		}
		m.val, m.end = int32(i), int32(end)
		if top && c.strip(&m) {
			m.flags |= memberStripped
		}
		c.members = append(c.members, m)
		i = c.ws(end)
		if i >= len(c.doc) {
			return 0, c.fail(i, "unterminated object")
		}
		if c.doc[i] == ',' {
			i = c.ws(i + 1)
			continue
		}
		if c.doc[i] == '}' {
			i++
			break
		}
		return 0, c.fail(i, "expected ',' or '}' in an object, found %s", quoteByte(c.doc[i]))
	}
	after := i
	last := len(c.members)
	slices.SortFunc(c.members[base:last], func(a, b member) int { return compareUTF16(c.nameOf(&a), c.nameOf(&b)) })
	for j := base + 1; j < last; j++ {
		if a, b := c.nameOf(&c.members[j-1]), c.nameOf(&c.members[j]); bytes.Equal(a, b) {
			return 0, c.fail(int(c.members[j].quoted), "duplicate member name %q", a)
		}
	}
	if last-base > 1 {
		if err := c.checkFolds(base, last); err != nil {
			return 0, err
		}
	}
	// Second pass: the members in order, each value canonicalised from the
	// document. (Values of nested objects push members above last.)
	c.w.writeByte('{')
	first := true
	for j := base; j < last; j++ {
		m := c.members[j]
		stripped := m.flags&memberStripped != 0
		if stripped {
			c.w.mute++ // still validated
		} else {
			if !first {
				c.w.writeByte(',')
			}
			first = false
			if m.flags&memberEscaped != 0 {
				c.emitDecoded(c.nameOf(&m))
			} else {
				c.w.write(c.doc[m.quoted : m.name+m.nameLen+1])
			}
			c.w.writeByte(':')
		}
		end, err := c.value(int(m.val))
		if stripped {
			c.w.mute--
		}
		if err != nil {
			return 0, err
		}
		if end != int(m.end) {
			return 0, c.fail(end, "unexpected %s after a member value", quoteByte(c.doc[end]))
		}
		if stripped && c.field != "" && string(c.nameOf(&m)) == c.field {
			c.taken = c.doc[m.val:m.end]
		}
	}
	c.w.writeByte('}')
	c.members = c.members[:base]
	c.names = c.names[:namesBase]
	c.depth--
	return after, nil
}

// strip reports whether the top-level member m is left out of the output.
func (c *canonicalizer) strip(m *member) bool {
	name := c.nameOf(m)
	if c.field != "" && string(name) == c.field {
		return true
	}
	for _, x := range c.exclude {
		if x == string(name) {
			return true
		}
	}
	return false
}

func (c *canonicalizer) nameOf(m *member) []byte {
	if m.flags&memberEscaped != 0 {
		return c.names[m.name : m.name+m.nameLen]
	}
	return c.doc[m.name : m.name+m.nameLen]
}

// foldEntry is a member's name folded to a hash, for checkFolds.
type foldEntry struct {
	h uint64
	i int32 // the member's index in canonicalizer.members
}

// checkFolds refuses an object, its members c.members[base:last] (sorted,
// without exact duplicates), in which two names are equal under Unicode
// case folding. Two different names can be equal so only if one holds an
// ASCII upper-case letter or a non-ASCII character, so an object of
// lower-case ASCII names (most) costs one look at each name. An ASCII
// object compares the names of equal length pairwise; one with non-ASCII
// names hashes each name in its folded form, compares the hashes
// (pairwise, or sorted for a large object) and confirms equal ones with
// bytes.EqualFold.
func (c *canonicalizer) checkFolds(base, last int) error {
	n := last - base
	if n <= smallObject {
		var kinds [smallObject]uint8
		all := uint8(0)
		for j := range n {
			k := nameKind(c.nameOf(&c.members[base+j]))
			kinds[j] = k
			all |= k
		}
		switch {
		case all == 0:
			return nil // lower-case ASCII only
		case all&kindNonASCII == 0:
			for j := 1; j < n; j++ {
				for k := range j {
					if kinds[j]|kinds[k] != 0 && c.members[base+j].nameLen == c.members[base+k].nameLen {
						if err := c.foldCollision(int32(base+k), int32(base+j)); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}
		var h [smallObject]uint64
		for j := range n {
			h[j] = foldHash(c.nameOf(&c.members[base+j]))
			for k := range j {
				if h[j] == h[k] {
					if err := c.foldCollision(int32(base+k), int32(base+j)); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	f := c.folds[:0]
	for j := base; j < last; j++ {
		f = append(f, foldEntry{h: foldHash(c.nameOf(&c.members[j])), i: int32(j)})
	}
	c.folds = f
	slices.SortFunc(f, func(a, b foldEntry) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return 0
	})
	for j := 1; j < len(f); j++ {
		for k := j - 1; k >= 0 && f[k].h == f[j].h; k-- {
			if err := c.foldCollision(f[k].i, f[j].i); err != nil {
				return err
			}
		}
	}
	return nil
}

// smallObject is the most members checkFolds compares pairwise.
const smallObject = 16

// Kinds of member names, for checkFolds.
const (
	kindUpper    uint8 = 1 << iota // holds an ASCII upper-case letter
	kindNonASCII                   // holds a non-ASCII character
)

// nameKind returns the kinds of name.
func nameKind(name []byte) uint8 {
	k := uint8(0)
	for _, b := range name {
		switch {
		case b >= utf8.RuneSelf:
			return k | kindNonASCII
		case b-'A' < 26:
			k = kindUpper
		}
	}
	return k
}

// foldCollision returns the error for members a and b when their names
// are equal under case folding (not a hash collision).
func (c *canonicalizer) foldCollision(a, b int32) error {
	ma, mb := &c.members[a], &c.members[b]
	na, nb := c.nameOf(ma), c.nameOf(mb)
	if !bytes.EqualFold(na, nb) {
		return nil
	}
	if ma.quoted > mb.quoted {
		ma, mb, na, nb = mb, ma, nb, na
	}
	return &canonError{
		msg: fmt.Sprintf("member names %q and %q differ only in letter case (a Go decoder reads them as one member)",
			na, nb),
		off:  int(mb.quoted),
		kind: ErrCaseVariantNames,
	}
}

// foldHash hashes name (valid UTF-8) folded as encoding/json folds member
// names: ASCII letters upper-cased, every other rune mapped to the
// smallest rune of its case folding orbit (so that K, k and U+212A KELVIN
// SIGN hash alike). Names equal under bytes.EqualFold hash alike.
func foldHash(name []byte) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(name); {
		b := name[i]
		if b < utf8.RuneSelf {
			if 'a' <= b && b <= 'z' {
				b -= 'a' - 'A'
			}
			h = (h ^ uint64(b)) * prime
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		h = (h ^ uint64(foldRune(r))) * prime
		i += size
	}
	return h
}

// foldRune returns the smallest rune of r's case folding orbit, as
// encoding/json's name folding does.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 sorts member names. That is byte (code point) order except
// where a character above U+FFFF meets one in U+E000-U+FFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	ka, kb := utf16Units(ra), utf16Units(rb)
	switch {
	case ka < kb:
		return -1
	case ka > kb:
		return 1
	}
	return 0
}

// utf16Units returns r's UTF-16 code units as one number that sorts like
// them: the first unit in the high half.
func utf16Units(r rune) uint32 {
	if r < 0x10000 {
		return uint32(r) << 16
	}
	hi, lo := utf16.EncodeRune(r)
	return uint32(hi)<<16 | uint32(lo)
}

// skip returns the offset after the value at c.doc[i], scanning lightly:
// the value is validated when it is written.
func (c *canonicalizer) skip(i int) (int, error) {
	depth := 0
	start := i
	for i < len(c.doc) {
		switch b := c.doc[i]; b {
		case '"':
			for i++; i < len(c.doc) && c.doc[i] != '"'; i++ {
				if c.doc[i] == '\\' {
					i++
				}
			}
			if i >= len(c.doc) {
				return 0, c.fail(start, "unterminated string")
			}
			i++
			if depth == 0 {
				return i, nil
			}
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				if i == start {
					return 0, c.fail(i, "expected a value, found %s", quoteByte(b))
				}
				return i, nil
			}
			depth--
			i++
			if depth == 0 {
				return i, nil
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				if i == start {
					return 0, c.fail(i, "expected a value, found %s", quoteByte(b))
				}
				return i, nil
			}
			i++
		default:
			i++
		}
	}
	if depth > 0 || i == start {
		return 0, c.fail(start, "unexpected end of JSON")
	}
	return i, nil
}

// scanString validates the string at c.doc[i] ('"') and returns the offset
// after it and whether it holds escapes. It refuses control characters,
// invalid UTF-8 and unpaired surrogates: read as U+FFFD they would merge
// different inputs into one key.
func (c *canonicalizer) scanString(i int) (end int, escaped bool, err error) {
	start := i
	d := c.doc
	for i++; i < len(d); {
		b := d[i]
		switch {
		case b == '"':
			return i + 1, escaped, nil
		case b == '\\':
			escaped = true
			if i+1 >= len(d) {
				return 0, false, c.fail(i, "unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return 0, false, c.fail(i, `invalid \u escape`)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r >= 0xdc00 {
						return 0, false, c.fail(i-6, `unpaired surrogate \u%04x`, r)
					}
					if r2, ok := hex4(d, i+2); ok && i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' && r2 >= 0xdc00 && r2 <= 0xdfff {
						i += 6
					} else {
						return 0, false, c.fail(i-6, `unpaired surrogate \u%04x`, r)
					}
				}
			default:
				return 0, false, c.fail(i, "invalid escape \\%c", d[i+1])
			}
		case b < 0x20:
			return 0, false, c.fail(i, "control character 0x%02x in a string (escape it)", b)
		case b < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, c.fail(i, "invalid UTF-8 byte 0x%02x in a string", b)
			}
			i += size
		}
	}
	return 0, false, c.fail(start, "unterminated string")
}

// hex4 reads four hex digits at d[i:].
func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, b := range d[i : i+4] {
		switch {
		case b >= '0' && b <= '9':
			r = r<<4 | rune(b-'0')
		case b >= 'a' && b <= 'f':
			r = r<<4 | rune(b-'a'+10)
		case b >= 'A' && b <= 'F':
			r = r<<4 | rune(b-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// decodeString appends the decoded content of the valid string
// c.doc[i:end] to dst.
func (c *canonicalizer) decodeString(i, end int, dst []byte) []byte {
	d := c.doc
	for i++; i < end-1; {
		b := d[i]
		if b != '\\' {
			j := i + 1
			for j < end-1 && d[j] != '\\' {
				j++
			}
			dst = append(dst, d[i:j]...)
			i = j
			continue
		}
		switch e := d[i+1]; e {
		case 'u':
			r, _ := hex4(d, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(d, i+2)
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, unescape(e))
			i += 2
		}
	}
	return dst
}

func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\', '/'
}

// emitEscapedString writes the valid string c.doc[i:end], which holds
// escapes, in canonical form.
func (c *canonicalizer) emitEscapedString(i, end int) {
	d := c.doc
	c.w.writeByte('"')
	for i++; i < end-1; {
		b := d[i]
		if b != '\\' {
			j := i + 1
			for j < end-1 && d[j] != '\\' {
				j++
			}
			c.w.write(d[i:j]) // raw characters are canonical
			i = j
			continue
		}
		var r rune
		switch e := d[i+1]; e {
		case 'u':
			r, _ = hex4(d, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				r2, _ := hex4(d, i+2)
				r = utf16.DecodeRune(r, r2)
				i += 6
			}
		default:
			r = rune(unescape(e))
			i += 2
		}
		c.emitRune(r)
	}
	c.w.writeByte('"')
}

// emitDecoded writes decoded string content s in canonical form.
func (c *canonicalizer) emitDecoded(s []byte) {
	c.w.writeByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r < 0x20 || r == '"' || r == '\\' {
			c.emitRune(r)
		} else {
			c.w.write(s[:size])
		}
		s = s[size:]
	}
	c.w.writeByte('"')
}

const lowerHexDigits = "0123456789abcdef"

// emitRune writes r as a canonical string character.
func (c *canonicalizer) emitRune(r rune) {
	switch r {
	case '"':
		c.w.writeString(`\"`)
	case '\\':
		c.w.writeString(`\\`)
	case '\b':
		c.w.writeString(`\b`)
	case '\f':
		c.w.writeString(`\f`)
	case '\n':
		c.w.writeString(`\n`)
	case '\r':
		c.w.writeString(`\r`)
	case '\t':
		c.w.writeString(`\t`)
	default:
		if r < 0x20 {
			c.w.writeString(`\u00`)
			c.w.writeByte(lowerHexDigits[r>>4])
			c.w.writeByte(lowerHexDigits[r&0xf])
			return
		}
		var buf [utf8.UTFMax]byte
		c.w.write(buf[:utf8.EncodeRune(buf[:], r)])
	}
}

// number writes the number at c.doc[i] by its exact decimal value, in
// ECMAScript Number::toString form, and returns the offset after it.
func (c *canonicalizer) number(i int) (int, error) {
	d := c.doc
	start := i
	neg := d[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return 0, c.fail(start, "invalid number")
	}
	intEnd := i
	fracStart, fracEnd := i, i
	if i < len(d) && d[i] == '.' {
		i++
		fracStart = i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		if i == fracStart {
			return 0, c.fail(start, "invalid number: no digits after '.'")
		}
		fracEnd = i
	}
	var exp int64
	hasExp := false
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		hasExp = true
		i++
		expNeg := false
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			expNeg = d[i] == '-'
			i++
		}
		expStart := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			if exp < 1<<40 {
				exp = exp*10 + int64(d[i]-'0')
			}
			i++
		}
		if i == expStart {
			return 0, c.fail(start, "invalid number: no digits in the exponent")
		}
		if expNeg {
			exp = -exp
		}
	}
	nInt, nFrac := intEnd-intStart, fracEnd-fracStart
	// Plain integers of up to 21 digits are their own canonical form.
	if !hasExp && nFrac == 0 && nInt <= 21 {
		if neg && nInt == 1 && d[intStart] == '0' {
			c.w.writeByte('0') // -0
		} else {
			c.w.write(d[start:i])
		}
		return i, nil
	}
	// The digits: positions 0..nInt+nFrac-1 over the integer and fraction
	// parts; the significant ones run from first to last.
	digit := func(p int) byte {
		if p < nInt {
			return d[intStart+p]
		}
		return d[fracStart+p-nInt]
	}
	total := nInt + nFrac
	first := 0
	for first < total && digit(first) == '0' {
		first++
	}
	if first == total {
		c.w.writeByte('0') // zero, however spelled
		return i, nil
	}
	last := total - 1
	for digit(last) == '0' {
		last--
	}
	k := int64(last - first + 1)
	// value = 0.D × 10^n, so 10^(n-1) <= |value| < 10^n.
	n := int64(nInt-first) + exp
	if n > MaxExponent || n < -MaxExponent {
		return 0, c.fail(start, "number out of range: its decimal exponent is beyond ±%d", MaxExponent)
	}
	// writeDigits writes significant digits a..b-1 (0-based from first).
	writeDigits := func(a, b int64) {
		pa, pb := first+int(a), first+int(b)
		if pa < nInt {
			c.w.write(d[intStart+pa : intStart+min(pb, nInt)])
		}
		if pb > nInt {
			c.w.write(d[fracStart+max(pa, nInt)-nInt : fracStart+pb-nInt])
		}
	}
	if neg {
		c.w.writeByte('-')
	}
	switch {
	case k <= n && n <= 21:
		writeDigits(0, k)
		for range n - k {
			c.w.writeByte('0')
		}
	case 0 < n && n <= 21:
		writeDigits(0, n)
		c.w.writeByte('.')
		writeDigits(n, k)
	case -6 < n && n <= 0:
		c.w.writeString("0.")
		for range -n {
			c.w.writeByte('0')
		}
		writeDigits(0, k)
	default:
		writeDigits(0, 1)
		if k > 1 {
			c.w.writeByte('.')
			writeDigits(1, k)
		}
		c.w.writeByte('e')
		e := n - 1
		if e >= 0 {
			c.w.writeByte('+')
		} else {
			c.w.writeByte('-')
			e = -e
		}
		var buf [20]byte
		c.w.write(strconv.AppendInt(buf[:0], e, 10))
	}
	return i, nil
}
