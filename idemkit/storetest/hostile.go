package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
)

// hostile holds bytes a text column of PostgreSQL refuses (NUL, invalid
// UTF-8) beside valid multi-byte characters.
const hostile = "a\x00b\xff\xfe\xc3(é😂\x80z"

// Whatever bytes a tool returns as its write ID or error text, or a
// heartbeat as its note, round-trip on every store, and a finish holding
// them succeeds (a finish that failed on them would leave the key in
// progress, and run the side effect again after every lease).
func (s *suite) hostileValues(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	var runs counter

	// A write ID: replayed and reported byte for byte.
	k := key(t, "s", "refund", `{"order":"o-h1"}`)
	first := mustDo(t, g, k, func(ctx context.Context) (idemkit.Response, error) {
		runs.n.Add(1)
		if err := idemkit.CallFromContext(ctx).HeartbeatNote(ctx, hostile); err != nil {
			return idemkit.Response{}, err
		}
		rec, err := g.Lookup(ctx, k)
		if err != nil {
			return idemkit.Response{}, err
		}
		if rec.Note != hostile {
			t.Errorf("stored note %q, want %q", rec.Note, hostile)
		}
		return idemkit.Response{Body: []byte("ok"), WriteID: hostile}, nil
	})
	if first.WriteID != hostile {
		t.Fatalf("first call's write ID %q", first.WriteID)
	}
	rep := mustDo(t, g, k, mustNotRun(t))
	if rep.Outcome != idemkit.OutcomeReplayed || rep.WriteID != hostile || string(rep.Body) != "ok" {
		t.Fatalf("replay: outcome %s write ID %q, want replayed with %q", rep.Outcome, rep.WriteID, hostile)
	}
	if rec, err := g.Lookup(ctx(t), k); err != nil || rec.WriteID != hostile {
		t.Fatalf("Lookup: write ID %q, %v", rec.WriteID, err)
	}

	// An error text: the release succeeds, so the retry takes over at once
	// instead of being told the failed call is in progress.
	kf := key(t, "s", "refund", `{"order":"o-h2"}`)
	boom := errors.New(hostile)
	if _, err := g.Do(ctx(t), kf, func(context.Context) (idemkit.Response, error) {
		runs.n.Add(1)
		return idemkit.Response{}, boom
	}); !errors.Is(err, boom) || errors.Is(err, idemkit.ErrStore) {
		t.Fatalf("failing work: err = %v, want only the work's error (the release must succeed)", err)
	}
	if rec, err := g.Lookup(ctx(t), kf); err != nil || rec.State != idemstore.StateReleased || rec.Error != hostile {
		t.Fatalf("released record: state %s error %q, %v; want released with %q", rec.State, rec.Error, err, hostile)
	}
	res := mustDo(t, g, kf, runs.work("second try"))
	if res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("retry after a failure with a hostile error text: %+v, want takeover attempt 2", res)
	}

	// An error text cut at the limit keeps its bytes up to the cut.
	kl := key(t, "s", "refund", `{"order":"o-h3"}`)
	long := strings.Repeat(hostile, idemstore.MaxErrorBytes)
	_, _ = g.Do(ctx(t), kl, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, errors.New(long) })
	rec, err := g.Lookup(ctx(t), kl)
	if want := clip.Text(long, idemstore.MaxErrorBytes); err != nil || rec.Error != want || len(want) > idemstore.MaxErrorBytes || len(want) < idemstore.MaxErrorBytes-3 {
		t.Fatalf("long error text: stored %d bytes (%v), want %d", len(rec.Error), err, len(want))
	}

	// A subject with such bytes is hashed into the key and works.
	ks := key(t, hostile, "refund", `{"order":"o-h4"}`)
	mustDo(t, g, ks, runs.work("subject"))
	if rep := mustDo(t, g, ks, mustNotRun(t)); rep.Outcome != idemkit.OutcomeReplayed {
		t.Fatalf("replay for a hostile subject: %s", rep.Outcome)
	}

	// A tool name a store cannot keep is refused before anything runs.
	for _, tool := range []string{"re\x00fund", "re\xfffund", "re\nfund"} {
		if _, err := idemkit.NewKey("s", tool, []byte(`{}`), nil); !errors.Is(err, idemkit.ErrInvalidKey) {
			t.Fatalf("NewKey with tool %q: %v, want ErrInvalidKey", tool, err)
		}
	}
	if n := runs.n.Load(); n != 4 {
		t.Fatalf("work ran %d times, want 4", n)
	}
}

// Two calls whose numbers differ only beyond a double's precision are two
// calls: each runs and gets its own result. Spellings of one value are one
// call and replay.
func (s *suite) exactNumbers(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	var c counter
	for _, pair := range [][2]string{
		{"9007199254740992", "9007199254740993"},
		{"12345678901234567890", "12345678901234567891"},
		{"0", "1e-400"},
	} {
		a := mustDo(t, g, key(t, "s", "refund", `{"order":`+pair[0]+`}`), c.work("refund of "+pair[0]))
		b := mustDo(t, g, key(t, "s", "refund", `{"order":`+pair[1]+`}`), c.work("refund of "+pair[1]))
		if (a.Outcome == idemkit.OutcomeReplayed) || (b.Outcome == idemkit.OutcomeReplayed) || string(b.Body) != "refund of "+pair[1] {
			t.Fatalf("orders %s and %s: the second got %q (replayed %v), want its own refund", pair[0], pair[1], b.Body, (b.Outcome == idemkit.OutcomeReplayed))
		}
	}
	mustDo(t, g, key(t, "s", "refund", `{"order":100}`), c.work("refund of 100"))
	for _, spelling := range []string{`{"order":1e2}`, `{"order":100.0}`, `{ "order" : 1000e-1 }`} {
		if r := mustDo(t, g, key(t, "s", "refund", spelling), mustNotRun(t)); r.Outcome != idemkit.OutcomeReplayed || string(r.Body) != "refund of 100" {
			t.Fatalf("%s: %+v, want the replay of order 100", spelling, r)
		}
	}
	if n := c.n.Load(); n != 7 {
		t.Fatalf("work ran %d times, want 7", n)
	}
}
