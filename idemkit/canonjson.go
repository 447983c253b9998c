package idemkit

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The canonical form NewKey hashes is RFC 8785 (JCS) with one deliberate
// deviation: numbers are canonicalised by their exact decimal value, not by
// the IEEE-754 double nearest to it.
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
// for byte; FuzzCanonicalJSON checks that against a JCS library.
//
// The canonicaliser streams: it writes canonical bytes straight into the
// hash (or a buffer, for CanonicalJSON), sorting an object's members by
// their names, then canonicalising each value from the input in that
// order. Its memory is the members of the objects being written (16 bytes
// each) and the decoded names that hold escapes, not a tree of the
// document.

// maxCanonDepth bounds the nesting of arrays and objects. An object's
// members are scanned once per enclosing object, so the bound also bounds
// the work.
const maxCanonDepth = 128

// maxCanonExponent bounds a number's decimal exponent.
const maxCanonExponent = 1_000_000_000

// canonWriter receives canonical bytes: into h, through buf, when h is set;
// else into buf.
type canonWriter struct {
	h    hash.Hash
	buf  []byte
	mute int // > 0: validate only, write nothing
}

func (w *canonWriter) write(b []byte) {
	if w.mute > 0 {
		return
	}
	if w.h != nil && len(w.buf)+len(b) > cap(w.buf) {
		w.flush()
		if len(b) > cap(w.buf) {
			w.h.Write(b)
			return
		}
	}
	w.buf = append(w.buf, b...)
}

func (w *canonWriter) writeByte(c byte) {
	if w.mute > 0 {
		return
	}
	if w.h != nil && len(w.buf) == cap(w.buf) {
		w.flush()
	}
	w.buf = append(w.buf, c)
}

func (w *canonWriter) writeString(s string) {
	if w.mute > 0 {
		return
	}
	if w.h != nil && len(w.buf)+len(s) > cap(w.buf) {
		w.flush()
	}
	w.buf = append(w.buf, s...)
}

func (w *canonWriter) flush() {
	if w.h != nil && len(w.buf) > 0 {
		w.h.Write(w.buf)
		w.buf = w.buf[:0]
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
	depth   int

	// Top-level stripping (NewKey): field is the explicit-key member, ""
	// for none; exclude are members left out.
	field    string
	exclude  []string
	explicit *string
}

type canonError struct {
	msg string
	off int
}

func (e *canonError) Error() string { return fmt.Sprintf("%s at offset %d", e.msg, e.off) }

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
	if c.depth++; c.depth > maxCanonDepth {
		return 0, c.fail(i, "arrays and objects nested deeper than %d levels", maxCanonDepth)
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
	if c.depth++; c.depth > maxCanonDepth {
		return 0, c.fail(i, "arrays and objects nested deeper than %d levels", maxCanonDepth)
	}
	top := c.depth == 1 && (c.field != "" || len(c.exclude) > 0)
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
			if err := c.takeExplicit(&m); err != nil {
				return 0, err
			}
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

// takeExplicit reads the explicit key from the field member m: a string,
// or null for none.
func (c *canonicalizer) takeExplicit(m *member) error {
	v := c.doc[m.val:m.end]
	if string(v) == "null" {
		return nil
	}
	if v[0] != '"' {
		return fmt.Errorf("the %q argument must be a string, got %s", c.field, truncate(v, 40))
	}
	s := string(c.decodeString(int(m.val), int(m.end), nil))
	c.explicit = &s
	return nil
}

func (c *canonicalizer) nameOf(m *member) []byte {
	if m.flags&memberEscaped != 0 {
		return c.names[m.name : m.name+m.nameLen]
	}
	return c.doc[m.name : m.name+m.nameLen]
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
	if n > maxCanonExponent || n < -maxCanonExponent {
		return 0, c.fail(start, "number out of range: its decimal exponent is beyond ±%d", maxCanonExponent)
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
