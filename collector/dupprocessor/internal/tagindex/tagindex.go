// Package tagindex is the open-addressing hash table the dup processor
// indexes its groups and evidence contexts with: from a keyed 32-bit tag
// to a 32-bit arena index.
package tagindex // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/tagindex"

import "math/bits"

// Index is an open-addressing hash table (linear probing, backward-shift
// deletion) from a 32-bit tag to a 32-bit arena index. It does not store
// the keys themselves: a tag match is only a candidate, which the caller
// confirms against the full key kept in the arena slot, so two keys whose
// tags collide are still told apart. A slot is 8 bytes and holds no
// pointer: 100,000 entries take 2 MiB that the garbage collector never
// scans, and a lookup of an absent key (the common case: a new call) reads
// one cache line.
//
// Unlike a Go map under constant insert-and-evict churn it leaves no
// tombstones. Tags come from a keyed hash (TagOf of Mix), so keys chosen by
// a sender cannot be made to collide. A lookup reads as:
//
//	for i := ix.Home(tag); ; i = ix.Next(i) {
//		s := ix.Slot(i)
//		if s.Tag == 0 { /* absent */ }
//		if s.Tag == tag && keyAt(s.Idx) == key { /* found */ }
//	}
//
// It is not safe for concurrent use. Use New: the zero Index has no slots.
type Index struct {
	slots []Slot
	n     int
	mask  uint32
	shift uint8
}

// Slot is one slot of an Index; Tag 0 marks it empty.
type Slot struct{ Tag, Idx uint32 }

const minBits = 10

// New returns an empty Index of 1024 slots; it doubles past half full.
func New() Index {
	return Index{slots: make([]Slot, 1<<minBits), mask: 1<<minBits - 1, shift: 64 - minBits}
}

// Mix is a keyed 64-bit mixer (the 128-bit product folded, as in wyhash).
func Mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// TagOf folds a keyed 64-bit hash into a non-zero tag.
func TagOf(h uint64) uint32 {
	t := uint32(h>>32) ^ uint32(h)
	if t == 0 {
		return 1
	}
	return t
}

// Home is the first slot probed for tag. It depends on the tag alone, so
// that deletion can find the home of every entry it shifts.
func (t *Index) Home(tag uint32) uint32 {
	return uint32((uint64(tag) * 0x9e3779b97f4a7c15) >> t.shift)
}

// Next is the slot probed after slot i.
func (t *Index) Next(i uint32) uint32 { return (i + 1) & t.mask }

// Slot returns slot i.
func (t *Index) Slot(i uint32) Slot { return t.slots[i] }

// Len returns the number of entries.
func (t *Index) Len() int { return t.n }

// Touch loads the home slot of tag and returns its tag, to bring the cache
// line in ahead of a lookup or insertion.
func (t *Index) Touch(tag uint32) uint32 { return t.slots[t.Home(tag)].Tag }

// TouchDel loads the home slot of tag and the one after it, ahead of a
// Del, whose backward shift reads on from the deleted slot.
func (t *Index) TouchDel(tag uint32) uint32 {
	h := t.Home(tag)
	return t.slots[h].Tag + t.slots[(h+1)&t.mask].Tag
}

// Insert adds (tag, idx); the caller has checked that its key is absent.
// The table doubles past half full.
func (t *Index) Insert(tag, idx uint32) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	t.place(tag, idx)
	t.n++
}

func (t *Index) place(tag, idx uint32) {
	for i := t.Home(tag); ; i = (i + 1) & t.mask {
		if t.slots[i].Tag == 0 {
			t.slots[i] = Slot{tag, idx}
			return
		}
	}
}

// Del removes the entry (tag, idx), shifting back the entries that probed
// past it. Removing an absent entry does nothing.
func (t *Index) Del(tag, idx uint32) {
	i := t.Home(tag)
	for {
		s := t.slots[i]
		if s.Tag == 0 {
			return
		}
		if s.Tag == tag && s.Idx == idx {
			break
		}
		i = (i + 1) & t.mask
	}
	t.n--
	for j := (i + 1) & t.mask; ; j = (j + 1) & t.mask {
		s := t.slots[j]
		if s.Tag == 0 {
			break
		}
		h := t.Home(s.Tag)
		// Move slot j back to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = Slot{}
}

func (t *Index) grow() {
	old := t.slots
	t.slots = make([]Slot, 2*len(old))
	t.mask = uint32(len(t.slots) - 1)
	t.shift = uint8(64 - bits.Len(uint(t.mask)))
	for _, s := range old {
		if s.Tag != 0 {
			t.place(s.Tag, s.Idx)
		}
	}
}
