package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
)

// storeRecords are the records seeded for the inspect and inflight tests.
type storeRecords struct {
	completed, running, abandoned, released idemkit.Key
}

// refundBody is the stored result of the completed refund.
const refundBody = `{"content":[{"type":"text","text":"refunded"}]}`

const inspectSubject = "bearer:4f7c0e2a1b9d8c3e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7a8b9c0"

// seed writes, through the Store and a Guard: a completed refund with a
// write ID, a running call with a progress note, an abandoned one (its
// lease ran out), and a released one with its failure.
func seed(t *testing.T, st idemstore.Store) storeRecords {
	t.Helper()
	ctx := context.Background()
	key := func(tool, args string) idemkit.Key {
		k, err := idemkit.NewKey(inspectSubject, tool, []byte(args), nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	var r storeRecords
	r.completed = key("issue_refund", `{"order_id":"o-1","amount_cents":500}`)
	g, err := idemkit.NewGuard(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, r.completed, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte(refundBody), WriteID: "re_42"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	explicit := key("issue_refund", `{"order_id":"o-9","idempotency_key":"k-9"}`)
	if _, err := g.Do(ctx, explicit, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte(refundBody)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	claim := func(k idemkit.Key, token int64, now time.Time) {
		t.Helper()
		res, err := st.Claim(ctx, idemstore.ClaimRequest{Key: k.ID(), Tool: k.Tool(), Token: token, Lease: time.Minute, Window: 2 * time.Hour, Now: now})
		if err != nil || res.Status != idemstore.ClaimAcquired {
			t.Fatalf("claim %s: %v %v", k.Tool(), res.Status, err)
		}
	}
	r.running = key("send_email", `{"to":"a@example.com"}`)
	claim(r.running, 7, time.Time{})
	if err := st.Extend(ctx, idemstore.ExtendRequest{Key: r.running.ID(), Token: 7, Lease: time.Minute, Note: "rendered the template; sending"}); err != nil {
		t.Fatal(err)
	}
	r.abandoned = key("issue_refund", `{"order_id":"o-2"}`)
	claim(r.abandoned, 8, time.Now().Add(-10*time.Minute))
	r.released = key("issue_refund", `{"order_id":"o-3"}`)
	claim(r.released, 9, time.Time{})
	if err := st.Finish(ctx, idemstore.FinishRequest{Key: r.released.ID(), Token: 9, Error: "card declined"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// exerciseInspect runs inspect and inflight against the store at url.
func exerciseInspect(t *testing.T, url string) {
	if code, out, errOut := runCLI(t, "migrate", "--store", url); code != exitOK {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	st, err := openStore(context.Background(), url, openOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := seed(t, st.Store)
	st.Close()

	t.Run("by key hash", func(t *testing.T) {
		code, out, errOut := runCLI(t, "inspect", "--store", url, r.completed.Hash())
		if code != exitOK {
			t.Fatalf("%d %q", code, errOut)
		}
		for _, want := range []string{r.completed.ID(), "issue_refund", "completed (duplicates get the stored result)", "write id", "re_42", fmt.Sprintf("%d bytes, inline", len(refundBody)), "attempt        1", "derived"} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, inspectSubject) {
			t.Errorf("inspect printed a raw subject:\n%s", out)
		}
	})
	t.Run("by the call, with the server's excluded and rounded fields", func(t *testing.T) {
		opts := &idemkit.KeyOptions{Exclude: []string{"/order/nonce"}, Round: map[string]time.Duration{"/sent_at": time.Minute}}
		k, err := idemkit.NewKey(inspectSubject, "stamp", []byte(`{"order":{"id":"o-7","nonce":"n1"},"sent_at":"2026-12-02T10:00:05Z"}`), opts)
		if err != nil {
			t.Fatal(err)
		}
		st, err := openStore(context.Background(), url, openOptions{})
		if err != nil {
			t.Fatal(err)
		}
		g, err := idemkit.NewGuard(st.Store, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
			return idemkit.Response{Body: []byte(refundBody), WriteID: "st_7"}, nil
		}); err != nil {
			t.Fatal(err)
		}
		st.Close()
		// A retry's arguments: another nonce, the same minute.
		retry := []string{"inspect", "--store", url, "--json", "--subject", inspectSubject, "--tool", "stamp",
			"--arguments", `{"order":{"id":"o-7","nonce":"n2"},"sent_at":"2026-12-02T10:00:59Z"}`}
		code, out, errOut := runCLI(t, append(retry, "--exclude", "/order/nonce", "--round", "/sent_at=1m")...)
		if code != exitOK {
			t.Fatalf("%d %q", code, errOut)
		}
		var v recordView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if v.Key != k.ID() || v.WriteID != "st_7" {
			t.Errorf("inspect with --exclude and --round found %+v, want the record of %s", v, k)
		}
		// Without the flags, the retry's arguments are another key.
		if code, out, _ := runCLI(t, retry...); code == exitOK && strings.Contains(out, k.ID()) {
			t.Errorf("without --exclude and --round the retry's arguments found the record: %s", out)
		}
		if code, _, errOut := runCLI(t, append(retry, "--round", "/sent_at=7m")...); code == exitOK || !strings.Contains(errOut, "divide 24h") {
			t.Errorf("--round /sent_at=7m: %d %q, want a usage error", code, errOut)
		}
	})
	t.Run("by the call", func(t *testing.T) {
		// The same arguments in another order and spacing: the same key.
		code, out, errOut := runCLI(t, "inspect", "--store", url, "--json", "--subject", inspectSubject,
			"--tool", "issue_refund", "--arguments", `{ "amount_cents": 500, "order_id": "o-1" }`)
		if code != exitOK {
			t.Fatalf("%d %q", code, errOut)
		}
		var v recordView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if v.Key != r.completed.ID() || v.KeyHash != r.completed.Hash() || v.State != "completed" || v.WriteID != "re_42" || v.Size != int64(len(refundBody)) ||
			v.SubjectHash != clip.Hash(inspectSubject) || v.Attempt != 1 || v.Expired || !v.ExpiresAt.After(v.Now) {
			t.Errorf("inspect --json: %+v", v)
		}
		if strings.Contains(out, inspectSubject) {
			t.Errorf("inspect printed a raw subject:\n%s", out)
		}
		// An explicit key reused with other arguments: the record is shown,
		// and so is the mismatch a call with these arguments would get.
		code, out, errOut = runCLI(t, "inspect", "--store", url, "--subject", inspectSubject,
			"--tool", "issue_refund", "--arguments", `{"order_id":"o-10","idempotency_key":"k-9"}`)
		if code != exitOK || !strings.Contains(out, "explicit (an idempotency_key)") || !strings.Contains(out, "this explicit key was used with other arguments") {
			t.Errorf("an explicit key reused: %d %q\n%s", code, errOut, out)
		}
	})
	t.Run("running, abandoned, released", func(t *testing.T) {
		_, out, _ := runCLI(t, "inspect", "--store", url, r.running.ID())
		for _, want := range []string{"in_progress: running", "lease until", "rendered the template; sending"} {
			if !strings.Contains(out, want) {
				t.Errorf("running: lacks %q:\n%s", want, out)
			}
		}
		_, out, _ = runCLI(t, "inspect", "--store", url, r.abandoned.Hash()[:12])
		if !strings.Contains(out, "abandoned (its lease ran out") {
			t.Errorf("abandoned:\n%s", out)
		}
		_, out, _ = runCLI(t, "inspect", "--store", url, r.released.Hash())
		if !strings.Contains(out, "released (the last attempt failed") || !strings.Contains(out, "card declined") {
			t.Errorf("released:\n%s", out)
		}
	})
	t.Run("errors", func(t *testing.T) {
		code, _, errOut := runCLI(t, "inspect", "--store", url, "00000000000000000000000000000000")
		if code != exitFailure || !strings.Contains(errOut, "has no record whose key starts with 00000000000000000000000000000000") {
			t.Errorf("an unknown hash: %d %q", code, errOut)
		}
		code, _, errOut = runCLI(t, "inspect", "--store", url, "--subject", "bearer:someone-else", "--tool", "issue_refund", "--arguments", `{"order_id":"o-1","amount_cents":500}`)
		if code != exitFailure || !strings.Contains(errOut, "no record of the issue_refund call with these arguments") {
			t.Errorf("another caller's identical call: %d %q", code, errOut)
		}
		for _, args := range [][]string{
			{"inspect", "--store", url, "xyz"},
			{"inspect", "--store", url},
			{"inspect", "--store", url, "--tool", "issue_refund"},
			{"inspect", "--store", url, r.completed.Hash(), "--tool", "issue_refund", "--subject", "s"},
			{"inspect", "--store", url, "--subject", "s", "--tool", "t", "--arguments", "[1,"},
			{"inflight", "--store", url, "--limit", "0"},
		} {
			if code, _, errOut := runCLI(t, args...); code != exitUsage {
				t.Errorf("%q: exit %d, want %d (%s)", args, code, exitUsage, errOut)
			}
		}
	})
	t.Run("inflight", func(t *testing.T) {
		code, out, errOut := runCLI(t, "inflight", "--store", url)
		if code != exitOK {
			t.Fatalf("%d %q", code, errOut)
		}
		for _, want := range []string{r.running.Hash(), "send_email", "rendered the template; sending", r.abandoned.Hash(), "abandoned", "2 claims in flight on this page, 1 abandoned"} {
			if !strings.Contains(out, want) {
				t.Errorf("inflight lacks %q:\n%s", want, out)
			}
		}
		for _, not := range []string{r.completed.Hash(), r.released.Hash(), "more:"} {
			if strings.Contains(out, not) {
				t.Errorf("inflight lists %q:\n%s", not, out)
			}
		}
		_, out, _ = runCLI(t, "inflight", "--store", url, "--tool", "send_email")
		if !strings.Contains(out, r.running.Hash()) || strings.Contains(out, r.abandoned.Hash()) {
			t.Errorf("inflight --tool send_email:\n%s", out)
		}

		// Pages of one, through --after, as JSON.
		var seen []string
		after := ""
		for page := 0; page < 5; page++ {
			args := []string{"inflight", "--store", url, "--limit", "1", "--json"}
			if after != "" {
				args = append(args, "--after", after)
			}
			code, out, errOut := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("%d %q", code, errOut)
			}
			var doc struct {
				Records   []recordView `json:"records"`
				NextAfter string       `json:"next_after"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for _, v := range doc.Records {
				if v.State != "in_progress" {
					t.Errorf("inflight listed a %s record", v.State)
				}
				seen = append(seen, v.Key)
			}
			if doc.NextAfter == "" {
				break
			}
			after = doc.NextAfter
		}
		if len(seen) != 2 || seen[0] >= seen[1] || !(seen[0] == r.running.ID() || seen[1] == r.running.ID()) {
			t.Errorf("paged through %v, want the two in-flight keys in order", seen)
		}
		_, out, _ = runCLI(t, "inflight", "--store", url, "--limit", "1")
		if !strings.Contains(out, "more: run it again with --after "+seen[0]) {
			t.Errorf("a full page does not say how to get the next:\n%s", out)
		}
	})
}

func TestInspectAndInflight_SQLite(t *testing.T) {
	exerciseInspect(t, "sqlite:"+filepath.Join(t.TempDir(), "idemkit.db"))

	missing := filepath.Join(t.TempDir(), "missing.db")
	code, _, errOut := runCLI(t, "inflight", "--store", "sqlite:"+missing)
	if code != exitFailure || !strings.Contains(errOut, "no SQLite store at") {
		t.Errorf("a missing SQLite file: %d %q", code, errOut)
	}
	if _, err := filepath.Glob(missing); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(missing + "*"); len(m) != 0 {
		t.Errorf("inflight created %v", m)
	}
	if code, _, _ := runCLI(t, "inspect", "--store", "memory", "0123456789abcdef"); code != exitUsage {
		t.Errorf("inspect --store memory: exit %d, want %d", code, exitUsage)
	}
}

func TestInspectAndInflight_Postgres(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	dsn := pgtest.DSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	exerciseInspect(t, dsn+sep+"search_path="+schema)
}
