package state

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// The stores earn their complexity (arenas, tag index, second-chance FIFO)
// only while they beat the plain Go maps that would do the same job. This
// benchmark keeps that question open: the processor's workload on its
// state, through the arena stores and through maps, interleaved.

// workload is what the processor does to its state for each span of a
// realistic stream: per tool call, find or create its group (evicting the
// oldest past the cap), read its members, add the call, and mark it in its
// context (its session, else its trace); per inference span, add its start
// to its trace's context; groups and contexts capped at maxState.
type workload interface {
	call(key *Key, ctx uint64, m Member) int
	chat(ctx uint64, start int64)
}

const maxState = 100_000

// arenaWorkload runs the workload on the processor's stores.
type arenaWorkload struct {
	groups Groups
	ctxs   Contexts
}

func newArenaWorkload() *arenaWorkload {
	return &arenaWorkload{groups: NewGroups(1, 2), ctxs: NewContexts(3, 4)}
}

func (w *arenaWorkload) call(key *Key, ctx uint64, m Member) int {
	tag := w.groups.Tag(key)
	gi := w.groups.Find(key, tag)
	if gi == 0 {
		if w.groups.Len() >= maxState {
			q := w.groups.Queue()
			for q.Len() > 0 {
				r := q.Pop()
				if w.groups.Live(r) != nil {
					w.groups.Remove(r.Idx, r.Tag)
					break
				}
			}
		}
		gi = w.groups.Create(key, tag)
	}
	n := 0
	for _, e := range w.groups.Members(gi) {
		if e.Same(&m) {
			return n
		}
		n++
	}
	w.groups.AddMember(gi, m)
	w.ctxs.AddTool(w.context(ctx), ToolMark{Start: m.Start, Key: key.Short()})
	return n + 1
}

func (w *arenaWorkload) context(c uint64) *Context {
	tag := w.ctxs.Tag(c)
	e := w.ctxs.Find(c, tag)
	if e == nil {
		if w.ctxs.Len() >= maxState {
			q := w.ctxs.Queue()
			for q.Len() > 0 {
				r := q.Pop()
				if w.ctxs.Live(r) != nil {
					w.ctxs.Remove(r.Idx)
					break
				}
			}
		}
		e = w.ctxs.Create(c, tag)
	}
	return e
}

func (w *arenaWorkload) chat(ctx uint64, start int64) { w.ctxs.AddChat(w.context(ctx), start) }

// mapWorkload runs the same workload on Go maps of pointers to structs
// holding slices, with FIFO eviction through slices of keys: what the
// processor would be without its custom structures.
type mapWorkload struct {
	groups     map[Key]*mapGroup
	groupOrder []Key
	ctxs       map[uint64]*mapContext
	ctxOrder   []uint64
}

type mapGroup struct{ members []Member }

type mapContext struct {
	chats []int64
	tools []ToolMark
}

func newMapWorkload() *mapWorkload {
	return &mapWorkload{groups: map[Key]*mapGroup{}, ctxs: map[uint64]*mapContext{}}
}

func (w *mapWorkload) call(key *Key, ctx uint64, m Member) int {
	g := w.groups[*key]
	if g == nil {
		if len(w.groups) >= maxState {
			delete(w.groups, w.groupOrder[0])
			w.groupOrder = w.groupOrder[1:]
		}
		g = &mapGroup{}
		w.groups[*key] = g
		w.groupOrder = append(w.groupOrder, *key)
	}
	for i := range g.members {
		if g.members[i].Same(&m) {
			return i
		}
	}
	if len(g.members) == MaxMembers {
		g.members = append(g.members[:0], g.members[1:]...)
	}
	g.members = append(g.members, m)
	c := w.context(ctx)
	if len(c.tools) == MaxEvidence {
		c.tools = append(c.tools[:0], c.tools[1:]...)
	}
	c.tools = append(c.tools, ToolMark{Start: m.Start, Key: key.Short()})
	return len(g.members)
}

func (w *mapWorkload) context(c uint64) *mapContext {
	e := w.ctxs[c]
	if e == nil {
		if len(w.ctxs) >= maxState {
			delete(w.ctxs, w.ctxOrder[0])
			w.ctxOrder = w.ctxOrder[1:]
		}
		e = &mapContext{}
		w.ctxs[c] = e
		w.ctxOrder = append(w.ctxOrder, c)
	}
	return e
}

func (w *mapWorkload) chat(ctx uint64, start int64) {
	c := w.context(ctx)
	if len(c.chats) == MaxEvidence {
		c.chats = append(c.chats[:0], c.chats[1:]...)
	}
	c.chats = append(c.chats, start)
}

// stream feeds a workload the processor benchmark's shape: per 100 spans,
// 57 new tool calls, 3 repeats of recent ones, 20 inference spans; five
// calls per trace, twenty per session.
type stream struct {
	rng *rand.Rand
	n   uint64
}

func (s *stream) batch(w workload) int {
	sum := 0
	for i := 0; i < 60; i++ {
		n := s.n
		if i >= 57 && s.n > 64 {
			n = s.n - 1 - uint64(s.rng.IntN(64)) // a duplicate of a recent call
		} else {
			s.n++
		}
		var k Key
		binary.LittleEndian.PutUint64(k[:], n*0x9e3779b97f4a7c15)
		binary.LittleEndian.PutUint64(k[8:], n)
		m := Member{Start: int64(s.n) * int64(time.Millisecond), Trace: n/5 + 1, Session: n/20 + 1<<40}
		binary.LittleEndian.PutUint64(m.SpanID[:], s.n<<8|uint64(i))
		sum += w.call(&k, m.Session, m)
	}
	for i := uint64(0); i < 20; i++ {
		w.chat(s.n/5+1-i%4, int64(s.n)*int64(time.Millisecond))
	}
	return sum
}

// BenchmarkStores_ArenaVsMaps streams the workload through the arena
// stores (candidate) and through plain maps (baseline), in alternating
// phases of 200 batches after 3,000 untimed batches each (both at their
// 100,000 caps and evicting), and reports each side's batches/s and their
// ratio (throughput-ratio: arena over maps, > 1 when the custom structures
// are faster). A batch is 60 tool calls and 20 inference spans.
func BenchmarkStores_ArenaVsMaps(b *testing.B) {
	sides := [2]struct {
		w       workload
		s       *stream
		elapsed time.Duration
	}{
		{w: newArenaWorkload(), s: &stream{rng: rand.New(rand.NewPCG(1, 2))}},
		{w: newMapWorkload(), s: &stream{rng: rand.New(rand.NewPCG(1, 2))}},
	}
	sink := 0
	for i := 0; i < 3000; i++ {
		sink += sides[0].s.batch(sides[0].w) + sides[1].s.batch(sides[1].w)
	}
	b.ReportAllocs()
	b.ResetTimer()
	const phase = 200
	for done, k := 0, 0; done < b.N; done, k = done+phase, k+1 {
		n := min(phase, b.N-done)
		for j := range 2 {
			s := &sides[(j+k)%2]
			start := time.Now()
			for i := 0; i < n; i++ {
				sink += s.s.batch(s.w)
			}
			s.elapsed += time.Since(start)
		}
	}
	b.StopTimer()
	arena := float64(b.N) / sides[0].elapsed.Seconds()
	maps := float64(b.N) / sides[1].elapsed.Seconds()
	b.ReportMetric(arena, "arena-batches/s")
	b.ReportMetric(maps, "maps-batches/s")
	b.ReportMetric(arena/maps, "throughput-ratio")
	if sink == 0 {
		b.Fatal("nothing tracked")
	}
}

// TestStores_WorkloadsAgree checks that the two implementations of the
// benchmark's workload do the same thing: the same member counts, call by
// call, past the caps.
func TestStores_WorkloadsAgree(t *testing.T) {
	a, m := newArenaWorkload(), newMapWorkload()
	sa, sm := &stream{rng: rand.New(rand.NewPCG(5, 5))}, &stream{rng: rand.New(rand.NewPCG(5, 5))}
	for i := 0; i < 2500; i++ { // 150,000 calls: past the 100,000 caps
		if got, want := sa.batch(a), sm.batch(m); got != want {
			t.Fatalf("batch %d: arena stores counted %d members, maps %d", i, got, want)
		}
	}
	if a.groups.Len() != len(m.groups) || a.ctxs.Len() != len(m.ctxs) {
		t.Fatalf("state sizes differ: arena %d groups %d contexts, maps %d groups %d contexts",
			a.groups.Len(), a.ctxs.Len(), len(m.groups), len(m.ctxs))
	}
}
