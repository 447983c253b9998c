package idemkit

import "math"

// The memory store's expiry index: every record in the store's map is in
// it, in a bucket by its deadline (memRecord.deadline) rounded up to
// memTick, no later than its deadline's bucket. A bucket whose time has
// come holds only records that have expired, that left the map meanwhile
// (replaced by a fresh claim, or deleted through an earlier entry), or
// whose deadline moved later since they were queued (a takeover, a
// heartbeat): those are queued again, in a bucket not yet due. A deadline
// that moves earlier (a call that completes before its lease would have
// run out, when the lease outlasts the window) queues the record again
// under it; its later entry is then found stale. So the store finds its
// expired records without scanning the map, and each entry is examined
// once: deleting what expired costs O(1) per record, amortised over the
// calls that queued it.

// memTick is the index's resolution: a record is found expired within a
// tick of its deadline.
const memTick = int64(100 * 1e6) // 100 ms in nanoseconds

// memSweepStep is how many queued records a claim of a new key examines
// when some are due: more than the one it adds, so that the store keeps up
// with any rate of new keys.
const memSweepStep = 4

// memRecordOverhead is what a record costs the store beyond its strings
// and body (MemoryStore.MaxBytes): the record (160 bytes), its map entry and
// its index entry, rounded up.
const memRecordOverhead = 256

// deadline is when r may expire, in Unix nanoseconds: the end of its window
// and, while in progress, of its lease (see expired).
func (r *memRecord) deadline() int64 {
	if r.state == memInProgress {
		return max(r.expiresAt, r.leaseUntil)
	}
	return r.expiresAt
}

// cost is what r counts against MemoryStore.MaxBytes.
func (r *memRecord) cost() int64 {
	n := memRecordOverhead + len(r.key) + len(r.tool) + len(r.fingerprint) + len(r.body) + len(r.writeID)
	if r.detail != nil {
		n += len(r.detail.lastError) + len(r.detail.note)
	}
	return int64(n)
}

// memQueue is the expiry index. Its zero value is empty.
type memQueue struct {
	heap  []*memBucket         // a min-heap by due
	byDue map[int64]*memBucket // the buckets in heap, by due
	last  *memBucket           // the bucket of the latest push, while in heap
	next  int64                // when heap[0] is due, in Unix nanoseconds
}

// memBucket holds the records whose deadline rounds up to due ticks.
type memBucket struct {
	due  int64        // in ticks: due at due*memTick
	recs []*memRecord // recs[:off] are processed (and nil)
	off  int
}

// dueBy reports whether some queued record's bucket is due at now.
func (q *memQueue) dueBy(now int64) bool { return len(q.heap) > 0 && q.next <= now }

// push queues r under deadline d.
func (q *memQueue) push(r *memRecord, d int64) {
	due := d / memTick
	if d%memTick > 0 {
		due++ // round up: a bucket is due only once all its records' deadlines have passed
	}
	b := q.last
	if b == nil || b.due != due {
		if b = q.byDue[due]; b == nil {
			b = &memBucket{due: due}
			if q.byDue == nil {
				q.byDue = make(map[int64]*memBucket)
			}
			q.byDue[due] = b
			q.heapPush(b)
		}
		q.last = b
	}
	b.recs = append(b.recs, r)
}

// head returns the earliest bucket, which must exist.
func (q *memQueue) head() *memBucket { return q.heap[0] }

// popHead removes the earliest bucket.
func (q *memQueue) popHead() {
	b := q.heap[0]
	delete(q.byDue, b.due)
	if q.last == b {
		q.last = nil
	}
	n := len(q.heap) - 1
	q.heap[0] = q.heap[n]
	q.heap[n] = nil
	q.heap = q.heap[:n]
	if n > 0 {
		q.down(0)
	}
	q.setNext()
}

func (q *memQueue) heapPush(b *memBucket) {
	q.heap = append(q.heap, b)
	q.up(len(q.heap) - 1)
	q.setNext()
}

func (q *memQueue) setNext() {
	switch {
	case len(q.heap) == 0:
		q.next = math.MaxInt64
	case q.heap[0].due > math.MaxInt64/memTick:
		q.next = math.MaxInt64
	default:
		q.next = q.heap[0].due * memTick
	}
}

func (q *memQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if q.heap[p].due <= q.heap[i].due {
			return
		}
		q.heap[p], q.heap[i] = q.heap[i], q.heap[p]
		i = p
	}
}

func (q *memQueue) down(i int) {
	n := len(q.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && q.heap[r].due < q.heap[l].due {
			c = r
		}
		if q.heap[i].due <= q.heap[c].due {
			return
		}
		q.heap[i], q.heap[c] = q.heap[c], q.heap[i]
		i = c
	}
}

// sweepDue deletes the records that have expired at now from the buckets
// due by then, examining at most examine queued records (negative: no
// bound) and deleting at most limit (zero or negative: no bound), and
// returns how many it deleted. s.mu must be held.
func (s *MemoryStore) sweepDue(now int64, examine, limit int) int {
	q := &s.queue
	n := 0
	for q.dueBy(now) {
		b := q.head()
		for b.off < len(b.recs) {
			if examine == 0 || limit > 0 && n >= limit {
				return n
			}
			examine--
			r := b.recs[b.off]
			b.recs[b.off] = nil
			b.off++
			switch {
			case r.state == memGone: // replaced or deleted already
			case r.expired(now):
				s.remove(r)
				n++
			default: // its deadline moved: queue it again (in a bucket not yet due)
				q.push(r, r.deadline())
			}
		}
		q.popHead()
	}
	return n
}

// requeue queues r again when its deadline moved earlier than was, the
// deadline it was queued under. s.mu must be held.
func (s *MemoryStore) requeue(r *memRecord, was int64) {
	if d := r.deadline(); d < was {
		s.queue.push(r, d)
	}
}

// remove deletes r, the live record of its key, from the store. s.mu must
// be held.
func (s *MemoryStore) remove(r *memRecord) {
	delete(s.records, r.key)
	s.forget(r)
}

// forget marks r gone (deleted, or replaced in the map by a fresh claim),
// uncounts it and drops what it holds, for a finish that still holds it as
// its handle to be told ErrLeaseLost. s.mu must be held.
func (s *MemoryStore) forget(r *memRecord) {
	s.bytes -= r.cost()
	r.state = memGone
	r.body, r.detail = nil, nil
}
