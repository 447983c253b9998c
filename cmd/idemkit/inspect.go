package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// minKeyHashLen is the shortest key hash prefix inspect accepts.
const minKeyHashLen = 8

func newInspectCmd() *cobra.Command {
	var (
		store, subject, tool, args, key string
		exclude                         []string
		round                           map[string]string
		asJSON                          bool
	)
	c := &cobra.Command{
		Use:   "inspect --store URL (KEY_HASH | --subject S --tool T --arguments JSON)",
		Short: "Show one idempotency key's record",
		Long: `inspect shows the record a store holds for one call's key, without claiming
or changing it: its state (in_progress: running, or abandoned once its
lease ran out without a heartbeat; completed; released; any of them
expired once its window is over), attempt, when its lease and its window
end, the size of the stored result, the write ID the tool recorded, the
last failure and the last progress note.

Name the key by its hash, the idemkit.key.hash attribute of the call's span
(32 hex characters; any prefix of at least 8 of the 64-character key ID),
or by the call itself: --subject, --tool and --arguments (the arguments as
the client sent them, idempotency_key included), from which the key is
derived exactly as the middleware and the gateway derive it. The subject is
what names the caller: the gateway's is "bearer:" followed by the hex
SHA-256 of the bearer token (printf %s "$TOKEN" | sha256sum), the
middleware's is what instrument.WithSubject returned, and a stdio server's
is empty (--subject ""). Stores hold no raw subject; inspect prints only its
hash.

A key hash that is an HMAC (the middleware's WithHashKey, the gateway's
--hash-key-file) is not the key's prefix: inspect such a call by --subject,
--tool and --arguments.`,
		Example: `  idemkit inspect --store sqlite:idemkit.db 3f2a9c0e51d84b7a9e6f1c2d3b4a5968
  idemkit inspect --store postgres://idemkit@db/idemkit --json 3f2a9c0e51d84b7a9e6f1c2d3b4a5968
  idemkit inspect --store sqlite:idemkit.db --subject "bearer:$(printf %s "$TOKEN" | sha256sum | cut -c1-64)" \
      --tool issue_refund --arguments '{"order_id":"o-1","amount_cents":500}'`,
		RunE: func(c *cobra.Command, pos []string) error {
			byCall := c.Flags().Changed("subject") || c.Flags().Changed("tool") || c.Flags().Changed("arguments") || c.Flags().Changed("key")
			var hash string
			switch {
			case len(pos) > 1:
				return usagef("inspect takes one KEY_HASH, got %d arguments", len(pos))
			case len(pos) == 1 && byCall:
				return usagef("give either a KEY_HASH or --subject, --tool and --arguments, not both")
			case len(pos) == 1:
				hash = strings.ToLower(strings.TrimSpace(pos[0]))
				if err := checkKeyHash(hash); err != nil {
					return err
				}
			case !byCall:
				return usagef("name the key: a KEY_HASH (the idemkit.key.hash of the call's span), or --subject, --tool and --arguments")
			case !c.Flags().Changed("subject") || tool == "":
				return usagef("--subject and --tool are both needed to derive a key (--subject \"\" for a stdio server's calls)")
			}
			var k idemkit.Key
			if byCall {
				rounds := make(map[string]time.Duration, len(round))
				for field, v := range round {
					d, err := time.ParseDuration(v)
					if err != nil {
						return usagef("--round %s=%s: %q is not a duration such as 1m or 1h", field, v, v)
					}
					rounds[field] = d
				}
				var err error
				k, err = idemkit.NewKey(subject, tool, []byte(args), &idemkit.KeyOptions{ExplicitKey: key, Exclude: exclude, Round: rounds})
				if err != nil {
					return &usageError{fmt.Errorf("the key cannot be derived from these flags: %w", err)}
				}
			}
			st, err := openAdminStore(c.Context(), store)
			if err != nil {
				return err
			}
			defer st.Close()
			rec, err := lookupRecord(c.Context(), st, hash, k)
			if err != nil {
				return err
			}
			v := viewRecord(&rec)
			if byCall {
				v.SubjectHash = clip.Hash(subject)
				if rec.Fingerprint != k.Fingerprint() {
					v.Mismatch = true
				}
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return v.writeText(c.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&store, "store", "", storeHelp)
	f.StringVar(&subject, "subject", "", `the caller's subject the key was derived with ("" for a stdio server's calls)`)
	f.StringVar(&tool, "tool", "", "the tool called")
	f.StringVar(&args, "arguments", "", "the call's arguments as a JSON object, as the client sent them (default: none)")
	f.StringVar(&key, "key", "", "the explicit idempotency key, when the client sent it in params._meta rather than in the arguments")
	f.StringSliceVar(&exclude, "exclude", nil, "argument fields the server leaves out of the key: top-level names or JSON Pointers (instrument.WithExclude)")
	f.StringToStringVar(&round, "round", nil, "timestamp fields the server rounds in the key, FIELD=GRANULARITY, such as /sent_at=1m (instrument.WithRound)")
	f.BoolVar(&asJSON, "json", false, "print the record as JSON")
	return c
}

// checkKeyHash checks a KEY_HASH argument: lowercase hex, 8 to 64
// characters.
func checkKeyHash(h string) error {
	if len(h) < minKeyHashLen || len(h) > 64 {
		return usagef("KEY_HASH %q must be %d to 64 hex characters (idemkit.key.hash has 32)", h, minKeyHashLen)
	}
	for _, r := range h {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return usagef("KEY_HASH %q is not hexadecimal", h)
		}
	}
	return nil
}

// lookupRecord finds the record of the key whose ID starts with hash, or
// of k when hash is "".
func lookupRecord(ctx context.Context, st *openedStore, hash string, k idemkit.Key) (idemstore.Record, error) {
	if hash == "" {
		rec, err := st.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()})
		if errors.Is(err, idemkit.ErrNotFound) {
			return rec, fmt.Errorf("the %s store has no record of the %s call with these arguments (key hash %s): it never ran here, or its window ended and a sweep deleted it",
				st.url, k.Tool(), k.Hash())
		}
		if err != nil {
			return rec, fmt.Errorf("read the %s store: %w", st.url, err)
		}
		return rec, nil
	}
	recs, err := st.List(ctx, idemstore.ListRequest{KeyPrefix: hash, Limit: 5})
	if err != nil {
		return idemstore.Record{}, fmt.Errorf("read the %s store: %w", st.url, err)
	}
	switch len(recs) {
	case 0:
		return idemstore.Record{}, fmt.Errorf("the %s store has no record whose key starts with %s: the call never ran here, its window ended and a sweep deleted it, "+
			"or the hash is an HMAC (WithHashKey, --hash-key-file; then inspect by --subject, --tool and --arguments)", st.url, hash)
	case 1:
		return recs[0], nil
	}
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\n  %s  %s", r.Key, r.Tool)
	}
	return idemstore.Record{}, &usageError{fmt.Errorf("%s names more than one record; give more of the key:%s", hash, b.String())}
}

// openAdminStore opens a SQL store for an operator command and checks its
// schema.
func openAdminStore(ctx context.Context, raw string) (*openedStore, error) {
	u, err := parseStoreURL(raw)
	if err != nil {
		return nil, err
	}
	switch u.kind {
	case kindMemory:
		return nil, usagef("--store memory lives inside one process: there is nothing to read from the command line; name a sqlite: or postgres: store")
	case kindSQLite:
		// Reading must not create an empty store where none was.
		if _, err := os.Stat(u.target); err != nil {
			return nil, fmt.Errorf("no SQLite store at %s: %w", u.target, err)
		}
	}
	st, err := openStore(ctx, raw, openOptions{})
	if err != nil {
		return nil, err
	}
	if err := st.requireSchema(ctx); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// recordView is a record as inspect and inflight print it.
type recordView struct {
	Key     string `json:"key"`
	KeyHash string `json:"key_hash"`
	// SubjectHash is idemkit.subject.hash of the subject the key was
	// derived with, when inspect derived it.
	SubjectHash string    `json:"subject_hash,omitempty"`
	Tool        string    `json:"tool"`
	State       string    `json:"state"`
	Abandoned   bool      `json:"abandoned"`
	Expired     bool      `json:"expired"`
	Attempt     int       `json:"attempt"`
	Started     time.Time `json:"started"`
	LeaseUntil  time.Time `json:"lease_until"`
	ExpiresAt   time.Time `json:"expires_at"`
	Now         time.Time `json:"now"`
	Explicit    bool      `json:"explicit_key"`
	// Mismatch reports an explicit key whose record was made with other
	// arguments than those inspect was given.
	Mismatch bool   `json:"mismatch,omitempty"`
	WriteID  string `json:"write_id,omitempty"`
	IsError  bool   `json:"is_error,omitempty"`
	Storage  string `json:"storage,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Error    string `json:"error,omitempty"`
	Note     string `json:"note,omitempty"`
}

func viewRecord(r *idemstore.Record) recordView {
	v := recordView{
		Key: r.Key, KeyHash: shortKey(r.Key), Tool: r.Tool, State: r.State.String(),
		Abandoned: r.Abandoned(), Expired: r.Expired(), Attempt: r.Attempt,
		Started: r.Started.UTC(), LeaseUntil: r.LeaseUntil.UTC(), ExpiresAt: r.ExpiresAt.UTC(), Now: r.Now.UTC(),
		Explicit: r.Fingerprint != "", Error: r.Error, Note: r.Note,
	}
	if r.State == idemstore.StateCompleted {
		v.WriteID, v.IsError, v.Size = r.WriteID, r.IsError, r.Size
		v.Storage = map[idemstore.Storage]string{idemstore.StorageInline: "inline", idemstore.StorageExternal: "external", idemstore.StorageDropped: "dropped"}[r.Storage]
	}
	return v
}

func shortKey(k string) string {
	if len(k) > spancontract.HashLen {
		return k[:spancontract.HashLen]
	}
	return k
}

// writeText prints the record for a person.
func (v *recordView) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	row("key", "%s", v.Key)
	row("key hash", "%s  (idemkit.key.hash on the call's spans)", v.KeyHash)
	if v.SubjectHash != "" {
		row("subject hash", "%s  (idemkit.subject.hash)", v.SubjectHash)
	}
	row("tool", "%s", v.Tool)
	state := v.State
	switch {
	case v.Expired:
		state += ": expired (its window is over; the next call starts afresh, and a sweep deletes it)"
	case v.Abandoned:
		state += ": abandoned (its lease ran out without a heartbeat; the next duplicate takes it over)"
	case v.State == "in_progress":
		state += ": running (duplicates are answered \"in progress\")"
	case v.State == "completed":
		state += " (duplicates get the stored result)"
	case v.State == "released":
		state += " (the last attempt failed; the next duplicate runs it again)"
	}
	row("state", "%s", state)
	if v.Mismatch {
		row("mismatch", "this explicit key was used with other arguments than those given: a call with these arguments is refused")
	}
	row("attempt", "%d", v.Attempt)
	row("started", "%s  (%s)", stamp(v.Started), relative(v.Started, v.Now))
	if v.State == "in_progress" {
		row("lease until", "%s  (%s)", stamp(v.LeaseUntil), relative(v.LeaseUntil, v.Now))
	}
	row("window ends", "%s  (%s)", stamp(v.ExpiresAt), relative(v.ExpiresAt, v.Now))
	if v.Explicit {
		row("key source", "explicit (an idempotency_key)")
	} else {
		row("key source", "derived (subject, tool and arguments)")
	}
	if v.State == "completed" {
		row("stored result", "%d bytes, %s", v.Size, v.Storage)
		row("is error", "%v", v.IsError)
		row("write id", "%s", dash(v.WriteID))
	}
	if v.Error != "" || v.State == "released" {
		row("last error", "%s", dash(v.Error))
	}
	if v.Note != "" || v.State == "in_progress" {
		row("note", "%s", dash(v.Note))
	}
	return tw.Flush()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// relative says how far t is from now: "in 12s", "3m4s ago".
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	}
	return "now"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newInflightCmd() *cobra.Command {
	var (
		store, tool, after string
		limit              int
		asJSON             bool
	)
	c := &cobra.Command{
		Use:   "inflight --store URL",
		Short: "List the claims in flight",
		Long: `inflight lists the records in progress: calls running now, and calls whose
worker died holding the claim (abandoned: their lease ran out; the next
duplicate takes them over). Each line has the key hash (the idemkit.key.hash
of the call's span; see idemkit inspect), the tool, the attempt, how long it
has run, its lease and its last progress note.

Records come in key order, a page at a time (--limit, at most 1000); when a
page is full, the last line says how to ask for the next one (--after).`,
		Example: `  idemkit inflight --store sqlite:idemkit.db
  idemkit inflight --store postgres://idemkit@db/idemkit --tool issue_refund --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if limit <= 0 || limit > idemstore.MaxListLimit {
				return usagef("--limit must be 1 to %d, got %d", idemstore.MaxListLimit, limit)
			}
			st, err := openAdminStore(c.Context(), store)
			if err != nil {
				return err
			}
			defer st.Close()
			recs, err := st.List(c.Context(), idemstore.ListRequest{State: idemstore.StateInProgress, Tool: tool, After: after, Limit: limit})
			if err != nil {
				return fmt.Errorf("read the %s store: %w", st.url, err)
			}
			next := ""
			if len(recs) == limit {
				next = recs[len(recs)-1].Key
			}
			views := make([]recordView, len(recs))
			for i := range recs {
				views[i] = viewRecord(&recs[i])
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Records []recordView `json:"records"`
					// NextAfter is the --after of the next page, "" on the
					// last one.
					NextAfter string `json:"next_after,omitempty"`
				}{views, next})
			}
			return writeInflight(c.OutOrStdout(), st.url, views, next)
		},
	}
	f := c.Flags()
	f.StringVar(&store, "store", "", storeHelp)
	f.StringVar(&tool, "tool", "", "only this tool's claims")
	f.StringVar(&after, "after", "", "start after this key (the last key of the previous page)")
	f.IntVar(&limit, "limit", idemstore.DefaultListLimit, "records per page")
	f.BoolVar(&asJSON, "json", false, `print {"records": [...], "next_after": "KEY"} as JSON`)
	return c
}

func writeInflight(w io.Writer, u storeURL, views []recordView, next string) error {
	if len(views) == 0 {
		_, err := fmt.Fprintf(w, "%s: no claim in flight\n", u)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY HASH\tTOOL\tATTEMPT\tRUNNING FOR\tLEASE\tNOTE")
	abandoned := 0
	for _, v := range views {
		lease := "ends " + relative(v.LeaseUntil, v.Now)
		if v.Abandoned {
			abandoned++
			lease = "abandoned " + strings.TrimSuffix(relative(v.LeaseUntil, v.Now), " ago") + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", v.KeyHash, v.Tool, v.Attempt, v.Now.Sub(v.Started).Round(time.Second), lease, oneLine(v.Note, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d %s in flight on this page", len(views), plural(len(views), "claim", "claims"))
	if abandoned > 0 {
		fmt.Fprintf(w, ", %d abandoned (the next duplicate takes each over)", abandoned)
	}
	fmt.Fprintln(w)
	if next != "" {
		_, err := fmt.Fprintf(w, "more: run it again with --after %s\n", next)
		return err
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return clip.Text(s, n) + "…"
	}
	return dash(s)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
