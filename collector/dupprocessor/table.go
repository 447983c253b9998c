package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import "math/bits"

// index is an open-addressing hash table (linear probing, backward-shift
// deletion) from a 32-bit tag to a 32-bit arena index. It does not store the
// keys themselves: a tag match is only a candidate, which the caller
// confirms against the full key kept in the arena slot (see
// dupProcessor.findGroup and findEvidence), so two keys whose tags collide
// are still told apart. A slot is 8 bytes and holds no pointer: 100,000
// entries take 2 MiB that the garbage collector never scans, and a lookup
// of an absent key (the common case: a new call) reads one cache line.
//
// Unlike a Go map under constant insert-and-evict churn it leaves no
// tombstones. Tags come from a keyed hash (tagOf), so keys chosen by a
// sender cannot be made to collide. It is not safe for concurrent use.
type index struct {
	slots []islot
	n     int
	mask  uint32
	shift uint8
}

// islot is one slot of an index; tag 0 marks it empty.
type islot struct{ tag, idx uint32 }

const indexMinBits = 10

func newIndex() index {
	return index{slots: make([]islot, 1<<indexMinBits), mask: 1<<indexMinBits - 1, shift: 64 - indexMinBits}
}

// tagOf folds a keyed 64-bit hash into a non-zero tag.
func tagOf(h uint64) uint32 {
	t := uint32(h>>32) ^ uint32(h)
	if t == 0 {
		return 1
	}
	return t
}

// home is the first slot probed for tag. It depends on the tag alone, so
// that deletion can find the home of every entry it shifts.
func (t *index) home(tag uint32) uint32 {
	return uint32((uint64(tag) * 0x9e3779b97f4a7c15) >> t.shift)
}

// len returns the number of entries.
func (t *index) len() int { return t.n }

// touch loads the home slot of tag and returns its tag, to bring the cache
// line in ahead of a lookup or insertion.
func (t *index) touch(tag uint32) uint32 { return t.slots[t.home(tag)].tag }

// insert adds (tag, idx); the caller has checked that its key is absent.
// The table doubles past half full.
func (t *index) insert(tag, idx uint32) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	t.place(tag, idx)
	t.n++
}

func (t *index) place(tag, idx uint32) {
	for i := t.home(tag); ; i = (i + 1) & t.mask {
		if t.slots[i].tag == 0 {
			t.slots[i] = islot{tag, idx}
			return
		}
	}
}

// del removes the entry (tag, idx), shifting back the entries that probed
// past it.
func (t *index) del(tag, idx uint32) {
	i := t.home(tag)
	for {
		s := t.slots[i]
		if s.tag == 0 {
			return
		}
		if s.tag == tag && s.idx == idx {
			break
		}
		i = (i + 1) & t.mask
	}
	t.n--
	for j := (i + 1) & t.mask; ; j = (j + 1) & t.mask {
		s := t.slots[j]
		if s.tag == 0 {
			break
		}
		h := t.home(s.tag)
		// Move slot j back to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = islot{}
}

func (t *index) grow() {
	old := t.slots
	t.slots = make([]islot, 2*len(old))
	t.mask = uint32(len(t.slots) - 1)
	t.shift = uint8(64 - bits.Len(uint(t.mask)))
	for _, s := range old {
		if s.tag != 0 {
			t.place(s.tag, s.idx)
		}
	}
}
