package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

// chunkBits sets the size of an arena chunk: 1024 slots.
const chunkBits = 10

const chunkLen = 1 << chunkBits

// arena is a growable array of T addressed by uint32 index, allocated in
// fixed-size chunks. Growing never copies or moves a slot, so a *T taken from
// it stays valid for the arena's life, and the memory held is at most one
// chunk more than the slots in use (an append-grown slice can hold twice).
// The processor only stores pointer-free types in arenas: the garbage
// collector then never scans their contents, however many there are.
// Freed slots are recycled through a free list (LIFO, so a slot freed by an
// eviction is the one the next new entry takes, while its cache line is
// still hot). Index 0 is reserved to mean "none".
type arena[T any] struct {
	chunks []*[chunkLen]T
	n      uint32   // slots handed out, index 0 included
	free   []uint32 // freed slots, reused first
}

// at returns the slot at index i (i < a.n).
func (a *arena[T]) at(i uint32) *T {
	return &a.chunks[i>>chunkBits][i&(chunkLen-1)]
}

// alloc returns the index of a slot for a new entry: a freed one if any,
// else a new one. The slot holds whatever its last user left there.
func (a *arena[T]) alloc() uint32 {
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

// ensure makes slot i exist, for an arena kept in step with another one
// that hands out the indexes (it then never uses its own free list).
func (a *arena[T]) ensure(i uint32) {
	for int(i>>chunkBits) >= len(a.chunks) {
		a.chunks = append(a.chunks, new([chunkLen]T))
	}
	if i >= a.n {
		a.n = i + 1
	}
}

// release returns slot i to the free list.
func (a *arena[T]) release(i uint32) { a.free = append(a.free, i) }

// ref names an arena slot in a queue: its index and the generation it had
// when queued, so that an entry whose slot was freed or reused since is
// recognised as stale, and its index tag, so that the index slot of a group
// or context about to be evicted can be loaded ahead without reading the
// arena slot first.
type ref struct{ idx, gen, tag uint32 }

// fifo is a queue in the order entries were pushed: the groups or contexts
// that evictions and expiry take from the front. It holds refs, not
// pointers, so the garbage collector does not scan it either.
type fifo struct {
	buf  []ref
	head int
}

func (q *fifo) len() int { return len(q.buf) - q.head }

func (q *fifo) push(v ref) { q.buf = append(q.buf, v) }

func (q *fifo) peek() ref { return q.buf[q.head] }

// at returns the i-th entry from the front (i < q.len()).
func (q *fifo) at(i int) ref { return q.buf[q.head+i] }

// pop removes and returns the front entry; the zero ref when empty.
func (q *fifo) pop() ref {
	if q.head == len(q.buf) {
		return ref{}
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
