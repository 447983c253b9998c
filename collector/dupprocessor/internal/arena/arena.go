// Package arena provides the pointer-free storage of the dup processor's
// state: growable arrays addressed by uint32 index whose slots never move,
// and FIFO queues of references to them. The processor only stores
// pointer-free types here, so the garbage collector never scans their
// contents, however many there are.
package arena // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/arena"

// chunkBits sets the size of an arena chunk: 1024 slots.
const chunkBits = 10

const chunkLen = 1 << chunkBits

// Arena is a growable array of T addressed by uint32 index, allocated in
// fixed-size chunks. Growing never copies or moves a slot, so a *T taken
// from it stays valid for the arena's life, and the memory held is at most
// one chunk more than the slots in use (an append-grown slice can hold
// twice). Freed slots are recycled through a free list (LIFO, so a slot
// freed by an eviction is the one the next new entry takes, while its cache
// line is still hot). Index 0 is reserved to mean "none". The zero Arena is
// empty and ready to use. It is not safe for concurrent use.
type Arena[T any] struct {
	chunks []*[chunkLen]T
	n      uint32   // slots handed out, index 0 included
	free   []uint32 // freed slots, reused first
}

// At returns the slot at index i (i was returned by Alloc or passed to Ensure).
func (a *Arena[T]) At(i uint32) *T {
	return &a.chunks[i>>chunkBits][i&(chunkLen-1)]
}

// Alloc returns the index of a slot for a new entry: a freed one if any,
// else a new one. The slot holds whatever its last user left there.
func (a *Arena[T]) Alloc() uint32 {
	if n := len(a.free); n > 0 {
		i := a.free[n-1]
		a.free = a.free[:n-1]
		return i
	}
	if a.n == 0 {
		a.n = 1 // index 0 means "none"
	}
	if int(a.n>>chunkBits) == len(a.chunks) {
		a.chunks = append(a.chunks, new([chunkLen]T))
	}
	i := a.n
	a.n++
	return i
}

// Ensure makes slot i exist, for an arena kept in step with another one
// that hands out the indexes (it then never uses its own free list).
func (a *Arena[T]) Ensure(i uint32) {
	for int(i>>chunkBits) >= len(a.chunks) {
		a.chunks = append(a.chunks, new([chunkLen]T))
	}
	if i >= a.n {
		a.n = i + 1
	}
}

// Release returns slot i to the free list.
func (a *Arena[T]) Release(i uint32) { a.free = append(a.free, i) }

// Ref names an arena slot in a queue: its index and the generation it had
// when queued, so that an entry whose slot was freed or reused since is
// recognised as stale, and its index tag, so that the index slot of an
// entry about to be evicted can be loaded ahead without reading the arena
// slot first.
type Ref struct{ Idx, Gen, Tag uint32 }

// FIFO is a queue of Refs in the order they were pushed: the entries that
// evictions and expiry take from the front. It holds no pointer, so the
// garbage collector does not scan it either. The zero FIFO is empty.
type FIFO struct {
	buf  []Ref
	head int
}

// Len returns the number of entries.
func (q *FIFO) Len() int { return len(q.buf) - q.head }

// Push appends v.
func (q *FIFO) Push(v Ref) { q.buf = append(q.buf, v) }

// Peek returns the front entry (the queue is not empty).
func (q *FIFO) Peek() Ref { return q.buf[q.head] }

// At returns the i-th entry from the front (i < q.Len()).
func (q *FIFO) At(i int) Ref { return q.buf[q.head+i] }

// Pop removes and returns the front entry; the zero Ref when empty.
func (q *FIFO) Pop() Ref {
	if q.head == len(q.buf) {
		return Ref{}
	}
	v := q.buf[q.head]
	q.head++
	if q.head >= 1024 && 2*q.head >= len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	return v
}
