package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import "math/bits"

// table is an open-addressing hash table from non-zero uint64 keys to V,
// with linear probing and backward-shift deletion. Unlike a Go map under
// constant insert-and-evict churn it leaves no tombstones, so a lookup of a
// new key stays one or two cache lines. Keys are mixed with a per-table
// seed, so keys chosen by a sender cannot be made to collide. It is not safe
// for concurrent use.
type table[V any] struct {
	slots []tableSlot[V]
	n     int
	shift uint8
	seed  uint64
}

type tableSlot[V any] struct {
	key uint64 // 0: empty
	val V
}

const tableMinBits = 10

func newTable[V any](seed uint64) *table[V] {
	return &table[V]{slots: make([]tableSlot[V], 1<<tableMinBits), shift: 64 - tableMinBits, seed: seed | 1}
}

func (t *table[V]) home(key uint64) uint64 {
	return ((key ^ t.seed) * 0x9e3779b97f4a7c15) >> t.shift
}

// len returns the number of entries.
func (t *table[V]) len() int { return t.n }

// get returns the value of key, or the zero V.
func (t *table[V]) get(key uint64) V {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key || s.key == 0 {
			return s.val
		}
	}
}

// touch loads the home slot of key and returns its key, to bring the cache
// line in ahead of get or put.
func (t *table[V]) touch(key uint64) uint64 {
	return t.slots[t.home(key)].key
}

// put sets the value of key (non-zero), growing the table past half full.
func (t *table[V]) put(key uint64, val V) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			s.val = val
			return
		}
		if s.key == 0 {
			s.key, s.val = key, val
			t.n++
			return
		}
	}
}

// del removes key, shifting back the entries that probed past it.
func (t *table[V]) del(key uint64) {
	mask := uint64(len(t.slots) - 1)
	i := t.home(key)
	for {
		if t.slots[i].key == key {
			break
		}
		if t.slots[i].key == 0 {
			return
		}
		i = (i + 1) & mask
	}
	t.n--
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		k := t.slots[j].key
		if k == 0 {
			break
		}
		h := t.home(k)
		// Move slot j back to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot[V]{}
}

func (t *table[V]) grow() {
	old := t.slots
	t.slots = make([]tableSlot[V], 2*len(old))
	t.shift = uint8(64 - bits.Len(uint(len(t.slots)-1)))
	t.n = 0
	for _, s := range old {
		if s.key != 0 {
			t.put(s.key, s.val)
		}
	}
}
