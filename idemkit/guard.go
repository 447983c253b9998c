package idemkit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Defaults of Config.
const (
	DefaultWindow            = 10 * time.Minute
	DefaultLease             = 2 * time.Minute
	DefaultMaxInlineResponse = 64 << 10
	DefaultMaxResponse       = 16 << 20
	defaultFinishTimeout     = 10 * time.Second
	DefaultSweepBatch        = 1000
)

// MaxDuration bounds Config's durations (Window, Lease, Wait and
// FinishTimeout, and a ToolConfig's): 100 years, far beyond any useful
// value, and far enough below the largest time.Duration that a deadline
// computed from it never overflows. NewGuard rejects a larger one, naming
// the field; stores clamp a larger request to it.
const MaxDuration = 100 * 365 * 24 * time.Hour

// Response is what a call produced: its Body (the serialised response; for
// MCP, the CallToolResult JSON), the WriteID of the downstream write it
// made (a refund ID, a row ID: stored with the body, so a replay reports
// the same one), and IsError, which marks a tool-level error result (MCP
// isError; whether such a response is stored and replayed is
// Config.FailurePolicy's choice). A successful Response is stored and
// replayed byte for byte to every duplicate. It is idemstore.Response,
// the form a store keeps.
type Response = idemstore.Response

// Outcome is what the Guard did with a call. The values are the
// idemkit.outcome span attribute's.
type Outcome string

// Outcomes.
const (
	OutcomeExecuted   Outcome = spancontract.OutcomeExecuted
	OutcomeReplayed   Outcome = spancontract.OutcomeReplayed
	OutcomeInProgress Outcome = spancontract.OutcomeInProgress
	OutcomeTakeover   Outcome = spancontract.OutcomeTakeover
	OutcomeMismatch   Outcome = spancontract.OutcomeMismatch
)

// Result is what Do returns.
type Result struct {
	// Response is the work's response (Executed, Takeover) or the stored one
	// (Replayed).
	Response
	// Outcome is executed, takeover or replayed.
	Outcome Outcome
	// Attempt is the claim's attempt count: 1 for a first run, higher after
	// takeovers.
	Attempt int
}

// FailurePolicy decides which failed attempts are stored and replayed.
// A Go error returned by the work is never stored: the claim is released and
// the next duplicate takes it over, because a duplicate must never be
// answered with an error it cannot act on, and an error usually means the
// work did not happen. Work that fails after its side effect has committed
// should return a Response describing it instead of an error.
type FailurePolicy uint8

// Failure policies. The zero value means "inherit" in ToolConfig and
// ReleaseToolErrors in Config.
const (
	// ReleaseToolErrors treats a tool-level error response (IsError) like a
	// Go error: the caller gets it, nothing is stored, and the next duplicate
	// runs the work again. Right for transient failures (a gateway timeout)
	// that a retry may fix.
	ReleaseToolErrors FailurePolicy = iota + 1
	// StoreToolErrors stores a tool-level error response and replays it like
	// a success. Right when an error result is a final decision (a payment
	// declined) that must not be re-attempted within the window.
	StoreToolErrors
)

// ToolConfig overrides Config for one tool. Zero fields inherit.
type ToolConfig struct {
	// StatusTool names the tool a model should call to check on an
	// in-progress call; the in-progress error text names it.
	StatusTool    string
	Window        time.Duration
	Lease         time.Duration
	Wait          time.Duration
	FailurePolicy FailurePolicy
	// MaxAttempts bounds the attempts of one call (one record): once that
	// many have failed or crashed, a retry is no longer taken over and runs
	// nothing; it gets an error matching ErrAttemptsExhausted (a poison-call policy),
	// until the window ends. Defaults to 0: no limit.
	MaxAttempts int
}

// Config configures a Guard. A nil *Config means all defaults.
type Config struct {
	// Window is how long a completed call deduplicates its duplicates,
	// measured from its claim. Pick it above the longest plausible retry gap
	// (about twice the client timeout) and below the interval at which a
	// user repeats the action on purpose. Defaults to DefaultWindow (10m).
	Window time.Duration

	// Lease is how long a claim holds without a heartbeat before a duplicate
	// may take it over, so that a crashed worker does not block its key for
	// the whole window. Work that may run longer must call Call.Heartbeat.
	// Defaults to DefaultLease (2m).
	Lease time.Duration

	// Wait makes a duplicate that finds the call in progress wait up to this
	// long for it to finish and then return its result, instead of returning
	// an *InProgressError at once. ctx still bounds the wait. Defaults to 0
	// (no wait).
	Wait time.Duration

	// FailurePolicy decides whether tool-level error responses are stored.
	// Defaults to ReleaseToolErrors.
	FailurePolicy FailurePolicy

	// MaxInlineResponseBytes is the largest body stored inside the claim
	// record; larger ones are stored apart and never read on the claim path.
	// Defaults to DefaultMaxInlineResponse (64 KiB).
	MaxInlineResponseBytes int

	// MaxResponseBytes is the largest body stored at all. A larger one is
	// not kept; the call is still recorded as done, and callers get a
	// *ResponseTooLargeError. Defaults to DefaultMaxResponse (16 MiB).
	MaxResponseBytes int

	// FinishTimeout bounds recording the outcome after the work, which runs
	// detached from the caller's cancellation so that a cancelled request
	// cannot leave a done call looking unfinished. Transient store errors
	// (a database restarting, a dropped connection, SQLite busy) are retried
	// with backoff until it runs out: pick it above the outages the store
	// should ride through. Defaults to 10 seconds.
	FinishTimeout time.Duration

	// SweepBatch is how many expired records one Sweep statement deletes.
	// Defaults to DefaultSweepBatch (1000).
	SweepBatch int

	// Tools holds per-tool overrides, by tool name. Defaults to none.
	Tools map[string]ToolConfig

	// Now returns the current time. Defaults to nil: the store's own clock,
	// which for SQL stores is the database's, the one clock all replicas
	// share. Set it in tests to drive leases and windows.
	Now func() time.Time

	// Logger receives one Error record for every finish that still failed
	// after its retries (see FinishError), with the tool, the key hash
	// (never the raw subject), the attempt and the store's error, and one
	// for every damaged record a duplicate met (see RecordDamagedError).
	// Defaults to slog.Default() at the time of the log call.
	Logger *slog.Logger

	// HashKey is the deployment's hash key: with it, every key hash the
	// Guard writes into its errors and log records is an HMAC-SHA-256
	// under it instead of a plain SHA-256, which a reader who guesses the
	// subject and the arguments could recompute (see the package doc). Use
	// the same key on every replica, and in the instrumentation's
	// instrument.WithHashKey (which applies it to the Guard it is given
	// when this is unset). It changes no stored record. At least 16 bytes;
	// use 32 random bytes. Defaults to none.
	HashKey []byte
}

func (c *Config) validate() error {
	check := func(name string, d time.Duration) error {
		switch {
		case d < 0:
			return fmt.Errorf("idemkit: Config.%s must not be negative, got %s", name, d)
		case d > MaxDuration:
			return fmt.Errorf("idemkit: Config.%s is %s, over the limit of %s (idemkit.MaxDuration, 100 years)", name, d, MaxDuration)
		}
		return nil
	}
	if err := errors.Join(check("Window", c.Window), check("Lease", c.Lease), check("Wait", c.Wait), check("FinishTimeout", c.FinishTimeout)); err != nil {
		return err
	}
	if c.MaxInlineResponseBytes < 0 || c.MaxResponseBytes < 0 || c.SweepBatch < 0 {
		return errors.New("idemkit: Config.MaxInlineResponseBytes, MaxResponseBytes and SweepBatch must not be negative")
	}
	if c.FailurePolicy > StoreToolErrors {
		return fmt.Errorf("idemkit: Config.FailurePolicy %d is not a known policy", c.FailurePolicy)
	}
	if n := len(c.HashKey); n > 0 && n < hashkey.MinKeyLen {
		return fmt.Errorf("idemkit: Config.HashKey is %d bytes, under the %d-byte minimum; use 32 random bytes", n, hashkey.MinKeyLen)
	}
	for name, t := range c.Tools {
		field := fmt.Sprintf("Tools[%q].", name)
		if err := errors.Join(check(field+"Window", t.Window), check(field+"Lease", t.Lease), check(field+"Wait", t.Wait)); err != nil {
			return err
		}
		if t.FailurePolicy > StoreToolErrors {
			return fmt.Errorf("idemkit: Config.Tools[%q].FailurePolicy %d is not a known policy", name, t.FailurePolicy)
		}
		if t.MaxAttempts < 0 {
			return fmt.Errorf("idemkit: Config.Tools[%q].MaxAttempts must not be negative, got %d", name, t.MaxAttempts)
		}
	}
	return nil
}

// toolPolicy is a resolved ToolConfig.
type toolPolicy struct {
	statusTool string
	window     time.Duration
	lease      time.Duration
	wait       time.Duration
	failure    FailurePolicy
	// maxAttempts is ToolConfig.MaxAttempts (0: no limit).
	maxAttempts int
}

// Guard runs work at most once per Key within a window. Build it with
// NewGuard; it is safe for concurrent use by many goroutines, and many
// Guards (in many processes) may share one durable Store.
type Guard struct {
	store     idemstore.Store
	mem       *MemoryStore // store itself when it is a *MemoryStore: called directly (see Do)
	inTx      bool         // set by InTx: never wait on a busy claim
	cfg       Config
	base      toolPolicy
	tools     map[string]toolPolicy
	maxInline int
	maxResp   int
	hasher    hashkey.Hasher // the key hashes of errors and log records

	// plainContexts makes run and finish build their contexts with
	// context.WithValue and context.WithoutCancel instead of the attempt.
	// Only BenchmarkGuard_HandRolledContexts sets it (export_test.go): the
	// baseline that shows what the attempt saves.
	plainContexts bool
}

// NewGuard returns a Guard that claims keys in store. cfg may be nil.
//
// It returns an error when store is nil, including a typed nil (a nil
// *sqlitestore.Store left by a failed Open), and when cfg is invalid; the
// error names the field.
func NewGuard(store idemstore.Store, cfg *Config) (*Guard, error) {
	if isNil(store) {
		if store == nil {
			return nil, errors.New("idemkit: NewGuard needs a Store, got nil")
		}
		return nil, fmt.Errorf("idemkit: NewGuard needs a Store, got a nil %T (did opening the store fail?)", store)
	}
	if m, ok := store.(*MemoryStore); ok {
		if err := m.validate(); err != nil {
			return nil, err
		}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	g := &Guard{cfg: c, hasher: hashkey.New(c.HashKey)}
	g.setStore(store)
	g.base = toolPolicy{
		window:  orDuration(c.Window, DefaultWindow),
		lease:   orDuration(c.Lease, DefaultLease),
		wait:    c.Wait,
		failure: c.FailurePolicy,
	}
	if g.base.failure == 0 {
		g.base.failure = ReleaseToolErrors
	}
	if len(c.Tools) > 0 {
		g.tools = make(map[string]toolPolicy, len(c.Tools))
		for name, t := range c.Tools {
			p := g.base
			p.statusTool = t.StatusTool
			p.window = orDuration(t.Window, p.window)
			p.lease = orDuration(t.Lease, p.lease)
			p.wait = orDuration(t.Wait, p.wait)
			if t.FailurePolicy != 0 {
				p.failure = t.FailurePolicy
			}
			p.maxAttempts = t.MaxAttempts
			g.tools[name] = p
		}
	}
	g.maxInline = c.MaxInlineResponseBytes
	if g.maxInline == 0 {
		g.maxInline = DefaultMaxInlineResponse
	}
	g.maxResp = c.MaxResponseBytes
	if g.maxResp == 0 {
		g.maxResp = DefaultMaxResponse
	}
	if g.cfg.FinishTimeout == 0 {
		g.cfg.FinishTimeout = defaultFinishTimeout
	}
	if g.cfg.SweepBatch == 0 {
		g.cfg.SweepBatch = DefaultSweepBatch
	}
	return g, nil
}

// isNil reports whether v is nil or an interface holding a nil pointer (or
// another nil reference).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

func orDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Store returns the Guard's store.
func (g *Guard) Store() idemstore.Store { return g.store }

// Config returns a copy of the configuration g was built with (Tools is a
// copy too), with FinishTimeout and SweepBatch set to their defaults when
// they were left zero, so that NewGuard(g.Store(), &cfg) builds a Guard
// that behaves as g. A layer that runs its own kind of work through g's
// store changes the fields it needs first: durable background runs set
// the lease their heartbeats keep and StoreToolErrors, for every tool.
func (g *Guard) Config() Config {
	c := g.cfg
	c.Tools = maps.Clone(g.cfg.Tools)
	return c
}

// label is the form of key the Guard's errors and log records carry: the
// tool, the key's source and its key hash (as Key.String, with the key
// hash keyed when the Guard has a hash key). Never the raw subject.
func (g *Guard) label(key Key) string {
	if !g.hasher.Keyed() {
		return key.String()
	}
	return key.tool + "/" + key.Source() + "/" + g.hasher.KeyHash(key.id)
}

// WithStore returns a copy of g, with the same configuration, that claims in
// s. Store packages use it to run the Guard inside a caller's transaction
// (see pgstore.DoTx).
func (g *Guard) WithStore(s idemstore.Store) *Guard {
	c := *g
	c.setStore(s)
	return &c
}

// setStore sets the Guard's store, and mem when it is a *MemoryStore: the
// Guard calls the memory store directly, without copying its requests and
// results through the Store interface (more than its own work costs), and
// without a finish timeout (its calls cannot block on I/O). Wrapped stores
// go through the interface.
func (g *Guard) setStore(s idemstore.Store) {
	g.store = s
	g.mem, _ = s.(*MemoryStore)
}

// InTx is WithStore for a store bound to a caller's transaction (see
// pgstore.DoTx, sqlitestore.DoTx). A duplicate that finds the call in
// progress is then answered with an *InProgressError at once, whatever Wait
// says: waiting inside the transaction would hold locks that the running
// call needs to record its outcome.
func (g *Guard) InTx(s idemstore.Store) *Guard {
	c := g.WithStore(s)
	c.inTx = true
	return c
}

func (g *Guard) policy(tool string) *toolPolicy {
	if g.tools != nil {
		if p, ok := g.tools[tool]; ok {
			return &p
		}
	}
	return &g.base
}

func (g *Guard) now() time.Time {
	if g.cfg.Now != nil {
		return g.cfg.Now()
	}
	return time.Time{}
}

// Work is the side effect a Guard protects. ctx carries the *Call (see
// CallFromContext), which holds the key to forward downstream and the
// heartbeat that keeps a long claim alive.
type Work func(ctx context.Context) (Response, error)

// Do runs work at most once for key within the window and returns its
// result, or the stored result of the call that ran it.
//
//   - First call: claims the key, runs work, stores the response, returns
//     Outcome "executed" (or "takeover" when it took over a failed or
//     abandoned attempt).
//   - Duplicate after success: returns the stored response byte for byte,
//     Outcome "replayed". A duplicate never gets an error for a call that
//     succeeded.
//   - Duplicate while in progress: returns an *InProgressError, after
//     waiting up to the tool's Wait for the first call to finish.
//   - Explicit key reused with other arguments: returns a *MismatchError.
//   - Duplicate of a completed call whose stored record cannot be read as
//     it was written (it fails the checksum kept with the outcome, names
//     an unknown storage kind, or its body stored apart is gone): returns
//     a *RecordDamagedError, logged, matching ErrRecordDamaged; the work
//     is not run again, since it ran. Records written before the stores
//     kept checksums are replayed unchecked.
//   - Work returns an error (or, by default, an IsError response): the claim
//     is released, the error (or response) is returned, and the next
//     duplicate runs the work again.
//   - Work panics: the claim is released and the panic continues.
//   - The call's earlier attempts failed ToolConfig.MaxAttempts times: an
//     error matching ErrAttemptsExhausted; work does not run, and the claim is
//     released again.
//   - The store fails on the claim: an error matching ErrStore; work has not
//     run. A store that is full (a MemoryStore at its limits) fails so with
//     an *idemstore.StoreFullError, which also matches idemstore.ErrStoreFull.
//   - The store fails to record the end of work that ran, after retrying
//     transient errors (ErrTransient) with backoff until FinishTimeout: a
//     *FinishError, matching ErrStore, which the Guard also logs. After a
//     success (FinishRecord) Do returns the Result with it. After the work
//     failed (FinishRelease) the *FinishError also matches the work's
//     error. Either way the key stays in progress until its lease runs out.
//     When another caller took the claim over meanwhile (the lease ran
//     out), recording fails with an error matching ErrLeaseLost instead.
//
// ctx bounds the claim, the wait and the work; the finish runs detached from
// ctx's cancellation, bounded by FinishTimeout.
func (g *Guard) Do(ctx context.Context, key Key, work Work) (Result, error) {
	return g.do(ctx, key, work, nil)
}

// do is Do, and DoPhased when ph is not nil.
func (g *Guard) do(ctx context.Context, key Key, work Work, ph *phase) (Result, error) {
	if key.IsZero() {
		return Result{}, fmt.Errorf("%w: the zero Key; build keys with NewKey", ErrInvalidKey)
	}
	p := g.policy(key.tool)
	req := idemstore.ClaimRequest{
		Key:         key.id,
		Tool:        key.tool,
		Fingerprint: key.Fingerprint(),
		Token:       newToken(),
		Lease:       p.lease,
		Window:      p.window,
	}
	var (
		waitUntil time.Time
		backoff   = 5 * time.Millisecond
		reread    bool // the claim was repeated after a body stored apart was not found
	)
	for {
		req.Now = g.now()
		var (
			cr  idemstore.ClaimResult
			err error
		)
		if g.mem != nil {
			err = g.mem.claim(ctx, &req, &cr)
		} else {
			cr, err = g.store.Claim(ctx, req)
		}
		if err != nil {
			if errors.Is(err, ErrRecordDamaged) {
				// The store found the record but cannot read it.
				return Result{}, g.damaged(key, 0, strings.TrimPrefix(err.Error(), ErrRecordDamaged.Error()+": "))
			}
			return Result{}, storeError("claim", g.label(key), err)
		}
		switch cr.Status {
		case idemstore.ClaimAcquired, idemstore.ClaimTakenOver:
			return g.run(ctx, &key, p, req.Token, &cr, work, ph)
		case idemstore.ClaimCompleted:
			res, err := g.replay(ctx, key, &cr)
			if err == errBodyMissing {
				if !reread {
					// The record may have expired and been swept since the
					// claim read it: claim again, which then starts afresh.
					reread = true
					continue
				}
				err = g.damaged(key, cr.Attempt, "its body stored apart is missing")
			}
			return res, err
		case idemstore.ClaimMismatch:
			return Result{}, &MismatchError{Tool: key.tool}
		case idemstore.ClaimBusy:
			if p.wait <= 0 || g.inTx {
				return Result{}, g.inProgress(key, p, cr)
			}
			if waitUntil.IsZero() {
				waitUntil = time.Now().Add(p.wait)
			}
			remaining := time.Until(waitUntil)
			if remaining <= 0 {
				return Result{}, g.inProgress(key, p, cr)
			}
			if err := sleep(ctx, min(backoff, remaining)); err != nil {
				return Result{}, g.inProgress(key, p, cr)
			}
			backoff = min(backoff*2, 250*time.Millisecond)
		default:
			return Result{}, storeError("claim", g.label(key), fmt.Errorf("store returned invalid claim status %d", cr.Status))
		}
	}
}

// attempt is a running call's state, allocated once. It is the work's
// context too: the caller's ctx plus the Call. Seen as a *detachedAttempt
// it is the finish's context.
type attempt struct {
	context.Context // the caller's ctx
	call            Call
}

func (a *attempt) Value(key any) any {
	if key == (callKey{}) {
		return &a.call
	}
	return a.Context.Value(key)
}

// detachedAttempt is an attempt seen as the finish's context: the caller's
// ctx's values without its cancellation (nor the Call), like
// context.WithoutCancel, without a separate allocation.
type detachedAttempt attempt

func (*detachedAttempt) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedAttempt) Done() <-chan struct{}       { return nil }
func (*detachedAttempt) Err() error                  { return nil }
func (d *detachedAttempt) Value(key any) any         { return d.Context.Value(key) }
func (*detachedAttempt) String() string              { return "idemkit.detached" }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (g *Guard) inProgress(key Key, p *toolPolicy, cr idemstore.ClaimResult) error {
	e := &InProgressError{Tool: key.tool, StatusTool: p.statusTool, Attempt: cr.Attempt, Started: cr.Started}
	now := cr.Now
	if now.IsZero() {
		now = g.now()
	}
	if now.IsZero() {
		now = time.Now()
	}
	if !cr.LeaseUntil.IsZero() {
		e.RetryAfter = max(cr.LeaseUntil.Sub(now), 0)
	}
	return e
}

// errBodyMissing is replay's report of a body stored apart that the store
// does not have.
var errBodyMissing = errors.New("idemkit: the body stored apart is missing")

// replay answers a duplicate from the completed record cr: the stored
// outcome, once it is read in full and matches the checksum stored with
// it. A record that cannot be read as it was written is refused with a
// *RecordDamagedError (logged), never replayed and never run again; a body
// stored apart that the store does not have is errBodyMissing.
func (g *Guard) replay(ctx context.Context, key Key, cr *idemstore.ClaimResult) (Result, error) {
	res := Result{Response: cr.Response, Outcome: OutcomeReplayed, Attempt: cr.Attempt}
	switch cr.Storage {
	case idemstore.StorageInline:
	case idemstore.StorageExternal:
		body, err := g.store.Response(ctx, key.id)
		if errors.Is(err, ErrNotFound) {
			return Result{}, errBodyMissing
		}
		if err != nil {
			return Result{}, storeError("load response", g.label(key), err)
		}
		res.Body = body
	case idemstore.StorageDropped:
		res.Body = nil
	default:
		return Result{}, g.damaged(key, cr.Attempt, fmt.Sprintf("unknown storage kind %d", cr.Storage))
	}
	if cr.Checksum != nil && !bytes.Equal(cr.Checksum, outcomeChecksum(key.id, cr.Storage, cr.Size, &res.Response)) {
		return Result{}, g.damaged(key, cr.Attempt, "checksum mismatch")
	}
	if cr.Storage == idemstore.StorageDropped {
		return Result{}, &ResponseTooLargeError{Tool: key.tool, Size: cr.Size, Limit: int64(g.maxResp)}
	}
	return res, nil
}

// checksumDomain separates outcome checksums from any other SHA-256 use.
const checksumDomain = "idemkit/outcome/v1\x00"

// outcomeChecksum returns the checksum of a completed record's outcome,
// everything a replay returns or decides by: the key, the storage kind,
// the size, the error flag, the write ID and the body (none is kept for
// StorageDropped). Binding the key means that a row's outcome copied onto
// another key's row fails too.
func outcomeChecksum(key string, storage idemstore.Storage, size int64, resp *Response) []byte {
	var stack [192]byte
	b := append(stack[:0], checksumDomain...)
	b = appendField(b, key)
	b = append(b, byte(storage))
	b = binary.AppendVarint(b, size)
	if resp.IsError {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendField(b, resp.WriteID)
	h := sha256.New()
	h.Write(b)
	if storage != idemstore.StorageDropped {
		h.Write(binary.AppendUvarint(stack[:0], uint64(len(resp.Body))))
		h.Write(resp.Body)
	}
	return h.Sum(make([]byte, 0, sha256.Size))
}

// damaged returns the *RecordDamagedError of key's record and logs it.
func (g *Guard) damaged(key Key, attempt int, reason string) error {
	e := &RecordDamagedError{Tool: key.tool, KeyHash: g.hasher.KeyHash(key.id), Attempt: attempt, Reason: reason}
	l := g.cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelError,
		"idemkit: a completed call's stored record is damaged; its duplicate was refused, neither replayed nor run again",
		slog.String("gen_ai.tool.name", e.Tool),
		slog.String("idemkit.key.hash", e.KeyHash),
		slog.Int("idemkit.attempt", e.Attempt),
		slog.String("reason", e.Reason),
	)
	return e
}

// run runs work under the claim cr of key (key and cr are only read).
func (g *Guard) run(ctx context.Context, key *Key, p *toolPolicy, token int64, cr *idemstore.ClaimResult, work Work, ph *phase) (res Result, err error) {
	// One allocation carries the Call and the contexts handed to the work
	// and to the finish.
	a := &attempt{
		Context: ctx,
		call:    Call{guard: g, key: *key, token: token, generation: cr.Generation, attempt: cr.Attempt, lease: p.lease, phase: ph},
	}
	if g.inTx {
		// The claim commits with the caller's transaction: an attempt
		// rolled back leaves no record to remember its generation by, and
		// its retry must forward the key it forwarded (see IdempotencyKey).
		a.call.generation = 0
	}
	fin := idemstore.FinishRequest{Key: key.id, Token: token, Handle: cr.Handle}
	res.Attempt = cr.Attempt
	res.Outcome = OutcomeExecuted
	if cr.Status == idemstore.ClaimTakenOver {
		res.Outcome = OutcomeTakeover
	}

	finished := false
	defer func() {
		if finished {
			return
		}
		// work panicked: release the claim (a failure is logged), then let
		// the panic continue.
		fin.Error = "panic"
		_ = g.end(a, &fin, nil, false)
	}()
	if p.maxAttempts > 0 && cr.Attempt > p.maxAttempts {
		finished = true
		return Result{}, g.exhausted(a, key, p, cr, token)
	}
	var wctx context.Context = a
	if g.plainContexts {
		c := a.call
		wctx = context.WithValue(ctx, callKey{}, &c)
	}
	resp, werr := work(wctx)
	finished = true

	if werr != nil {
		fin.Error = clip.Text(werr.Error(), idemstore.MaxErrorBytes)
		if ferr := g.end(a, &fin, werr, false); ferr != nil {
			return Result{}, ferr // matches werr, ErrStore and *FinishError
		}
		return Result{}, werr
	}
	res.Response = resp
	if resp.IsError && p.failure != StoreToolErrors {
		fin.Error = "tool error"
		return res, g.end(a, &fin, nil, true)
	}

	fin.Succeeded = true
	fin.Response = resp
	fin.Size = int64(len(resp.Body))
	var tooLarge error
	switch {
	case resp.NotKept || len(resp.Body) > g.maxResp:
		fin.Storage = idemstore.StorageDropped
		fin.Response.Body, fin.Response.NotKept = nil, false
		if resp.NotKept {
			fin.Size = 0 // a body that could not be kept at all (see ResponseTooLargeError)
		}
		tooLarge = &ResponseTooLargeError{Tool: key.tool, Size: fin.Size, Limit: int64(g.maxResp), Result: res}
	case len(resp.Body) > g.maxInline:
		fin.Storage = idemstore.StorageExternal
	}
	if g.mem == nil {
		// A store outside the process keeps the outcome's checksum, which
		// every replay verifies. (The memory store's records live in this
		// process's memory, which nothing else writes.)
		fin.Checksum = outcomeChecksum(key.id, fin.Storage, fin.Size, &fin.Response)
	}
	if ferr := g.end(a, &fin, nil, true); ferr != nil {
		return res, ferr
	}
	if tooLarge != nil {
		return res, tooLarge
	}
	return res, nil
}

// Backoff of the finish's retries: the first wait, and the longest.
const (
	finishBackoffMin = 20 * time.Millisecond
	finishBackoffMax = time.Second
)

// finish records an attempt's end, detached from the caller's
// cancellation. A transient store error (ErrTransient) is retried with
// jittered exponential backoff until FinishTimeout: the finish is fenced by
// its token and idempotent, so a retry after a lost acknowledgement is
// safe. Inside a caller's transaction (InTx) it is tried once, since a
// failed statement aborts the transaction.
//
// It returns nil on success, and for a release whose claim another caller
// already took over (the release's purpose is met). Otherwise it returns an
// error matching ErrLeaseLost (a record whose claim was taken over) or a
// logged *FinishError.
func (g *Guard) finish(a *attempt, fin *idemstore.FinishRequest, workErr error) error {
	var fctx context.Context = (*detachedAttempt)(a)
	if g.plainContexts {
		fctx = context.WithoutCancel(a.Context)
	}
	timed := false
	if g.mem == nil {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(fctx, g.cfg.FinishTimeout)
		defer cancel()
		timed = true
	}
	fin.Now = g.now()
	var err error
	if g.mem != nil {
		err = g.mem.finish(fctx, fin)
	} else {
		err = g.store.Finish(fctx, *fin)
	}
	if err == nil {
		return nil
	}
	return g.finishFailed(fctx, timed, a.call.key, a.call.attempt, *fin, workErr, err)
}

// finishFailed continues a finish whose first try failed with err: it
// retries transient errors and reports the rest. (Apart from finish, so
// that the common path has no defer in a loop.) timed says whether fctx
// already carries FinishTimeout.
func (g *Guard) finishFailed(fctx context.Context, timed bool, key Key, attemptN int, fin idemstore.FinishRequest, workErr, err error) error {
	var deadline time.Time
	backoff := finishBackoffMin
	tries := 1
	var prev error // the previous try's error
	for {
		if prev != nil && fctx.Err() != nil && errors.Is(err, fctx.Err()) {
			err = prev // the deadline ended this try: report the store's failure
		}
		prev = err
		if errors.Is(err, ErrLeaseLost) {
			if !fin.Succeeded {
				return nil // released, or taken over: either way not ours to release
			}
			return fmt.Errorf("idemkit: finish %s: %w", g.label(key), err)
		}
		retry := !g.inTx && errors.Is(err, idemstore.ErrTransient) && fctx.Err() == nil
		if retry && !timed {
			// An in-process store: bound the retries from the first error.
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(fctx, g.cfg.FinishTimeout)
			defer cancel()
			timed = true
		}
		if retry {
			if deadline.IsZero() {
				deadline, _ = fctx.Deadline()
			}
			// Full jitter in [backoff/2, backoff), and always time left
			// for one more try before the deadline.
			wait := backoff/2 + rand.N(backoff/2)
			remaining := time.Until(deadline)
			retry = remaining > finishBackoffMin/2 && sleep(fctx, min(wait, remaining-remaining/4)) == nil
			backoff = min(2*backoff, finishBackoffMax)
		}
		if !retry {
			op := FinishRecord
			if !fin.Succeeded {
				op = FinishRelease
			}
			fe := &FinishError{Op: op, Tool: key.tool, KeyHash: g.hasher.KeyHash(key.id), Attempt: attemptN, Tries: tries, Err: err, WorkErr: workErr}
			g.logFinishError(fe)
			return fe
		}
		tries++
		fin.Now = g.now()
		if err = g.store.Finish(fctx, fin); err == nil {
			return nil
		}
	}
}

func (g *Guard) logFinishError(fe *FinishError) {
	l := g.cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), slog.LevelError, "idemkit: finish failed after retries",
		slog.String("idemkit.finish.op", string(fe.Op)),
		slog.String("gen_ai.tool.name", fe.Tool),
		slog.String("idemkit.key.hash", fe.KeyHash),
		slog.Int("idemkit.attempt", fe.Attempt),
		slog.Int("tries", fe.Tries),
		slog.String("error", fe.Err.Error()),
	)
}

// newToken returns a random, non-zero fencing token.
func newToken() int64 {
	for {
		if t := rand.Int64(); t != 0 {
			return t
		}
	}
}

type callKey struct{}

// Call is the running attempt of a Guard.Do, available to the work through
// CallFromContext. Its methods are safe for concurrent use and safe on a nil
// *Call (they then do nothing), so helpers may call them unconditionally.
type Call struct {
	guard      *Guard
	key        Key
	token      int64
	generation int64  // the record's (see IdempotencyKey)
	phase      *phase // DoPhased's local phase; nil for Do
	attempt    int
	lease      time.Duration
}

// CallFromContext returns the attempt running in ctx, or nil outside
// Guard.Do's work.
func CallFromContext(ctx context.Context) *Call {
	c, _ := ctx.Value(callKey{}).(*Call)
	return c
}

// Key returns the attempt's key.
func (c *Call) Key() Key {
	if c == nil {
		return Key{}
	}
	return c.key
}

// Attempt returns the attempt's number: 1 for the first run, higher after
// takeovers, when the previous attempt may have done part of the work.
func (c *Call) Attempt() int {
	if c == nil {
		return 0
	}
	return c.attempt
}

// Heartbeat extends the attempt's lease by the tool's Lease from now, so
// that a long-running call is not taken over as abandoned. It returns an
// error matching ErrLeaseLost when another caller has already taken the
// claim over: the work should then stop, because its outcome will not be
// recorded. ctx bounds the store call.
func (c *Call) Heartbeat(ctx context.Context) error {
	return c.HeartbeatNote(ctx, "")
}

// HeartbeatNote is Heartbeat that also stores a short progress note with
// the record ("charged the card; sending the receipt"), which Guard.Lookup
// and Store.Lookup report as Record.Note until the next note or attempt. A
// note longer than MaxNoteBytes is cut at a character boundary; "" keeps
// the previous note. Notes are for operators and status tools: never put
// secrets or raw arguments in them.
func (c *Call) HeartbeatNote(ctx context.Context, note string) error {
	if c == nil {
		return nil
	}
	req := idemstore.ExtendRequest{Key: c.key.id, Token: c.token, Lease: c.lease, Note: clip.Text(note, idemstore.MaxNoteBytes), Now: c.guard.now()}
	err := c.guard.store.Extend(ctx, req)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("idemkit: heartbeat %s: %w", c.guard.label(c.key), err)
	}
	return storeError("heartbeat", c.guard.label(c.key), err)
}

// Lookup returns the record of key as its store holds it, with the stored
// response body of a completed record, without claiming or changing it. It
// returns an error matching ErrNotFound when the store has no record of
// key, a *MismatchError when key is an explicit key whose record was made
// with other arguments (its body is not returned), and errors matching
// ErrStore when the store fails. An expired record not yet swept is
// returned as it is: Record.Expired tells. ctx bounds the read.
//
// A status tool uses it to report on a call by its key: in progress (with
// the last heartbeat's Note), completed (with the body a duplicate would
// get), or released after a failure (with its Error).
func (g *Guard) Lookup(ctx context.Context, key Key) (idemstore.Record, error) {
	if key.IsZero() {
		return idemstore.Record{}, fmt.Errorf("%w: the zero Key; build keys with NewKey", ErrInvalidKey)
	}
	rec, err := g.store.Lookup(ctx, idemstore.LookupRequest{Key: key.id, Body: true, Now: g.now()})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return idemstore.Record{}, fmt.Errorf("idemkit: lookup %s: %w", g.label(key), err)
		}
		return idemstore.Record{}, storeError("lookup", g.label(key), err)
	}
	if rec.Fingerprint != key.Fingerprint() {
		return idemstore.Record{}, &MismatchError{Tool: key.tool}
	}
	if rec.State == idemstore.StateCompleted {
		if err := g.checkRecord(key, &rec); err != nil {
			rec.Body = nil
			return rec, err
		}
	}
	return rec, nil
}

// checkRecord verifies a completed record read by Lookup as replay does.
func (g *Guard) checkRecord(key Key, rec *idemstore.Record) error {
	if rec.Storage > idemstore.StorageDropped {
		return g.damaged(key, rec.Attempt, fmt.Sprintf("unknown storage kind %d", rec.Storage))
	}
	if rec.Checksum == nil {
		return nil
	}
	resp := Response{Body: rec.Body, WriteID: rec.WriteID, IsError: rec.IsError}
	if !bytes.Equal(rec.Checksum, outcomeChecksum(key.id, rec.Storage, rec.Size, &resp)) {
		return g.damaged(key, rec.Attempt, "checksum mismatch")
	}
	return nil
}

// Cancel ends the attempt in progress on key, whichever caller (in
// whichever process) holds it, and releases the record with reason as its
// Error (cut to MaxErrorBytes) and Record.Cancelled set: the attempt's next
// heartbeat and its finish fail with ErrLeaseLost, and the next duplicate
// takes the key over and runs the work again, as after a failure. Use it to
// stop a background run on request, or, as an operator, to free a key whose
// call hangs. It returns the record afterwards.
//
// It returns the record as it stands with an error matching
// ErrNotInProgress when nothing is in progress (the call completed, or was
// released or cancelled already), an error matching ErrNotFound when there
// is no record, and errors matching ErrStore when the store fails. ctx
// bounds the store call.
func (g *Guard) Cancel(ctx context.Context, key Key, reason string) (idemstore.Record, error) {
	return g.cancel(ctx, key, reason, false)
}

// ReleaseAbandoned is Cancel for an abandoned attempt only: one whose lease
// has run out, because its worker died or hangs. It releases the record as
// Cancel does; a live attempt is left alone, and the record is returned
// with an error matching ErrInProgress. A status reader calls it when it
// finds a background run abandoned, so that its answer ("the worker
// stopped") stays true: a worker that was only slow cannot heartbeat the
// run back to life, nor record an outcome, after it.
func (g *Guard) ReleaseAbandoned(ctx context.Context, key Key, reason string) (idemstore.Record, error) {
	return g.cancel(ctx, key, reason, true)
}

func (g *Guard) cancel(ctx context.Context, key Key, reason string, abandoned bool) (idemstore.Record, error) {
	if key.IsZero() {
		return idemstore.Record{}, fmt.Errorf("%w: the zero Key; build keys with NewKey", ErrInvalidKey)
	}
	rec, err := g.store.Cancel(ctx, idemstore.CancelRequest{Key: key.id, Reason: clip.Text(reason, idemstore.MaxErrorBytes), Abandoned: abandoned, Now: g.now()})
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, ErrNotInProgress), errors.Is(err, ErrInProgress), errors.Is(err, ErrNotFound):
		return rec, fmt.Errorf("idemkit: cancel %s: %w", g.label(key), err)
	}
	return rec, storeError("cancel", g.label(key), err)
}

// Sweep deletes expired records in batches of Config.SweepBatch until a
// batch comes back short, and returns how many it deleted. It is safe to run
// from many replicas at once. ctx bounds the whole sweep.
func (g *Guard) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := g.store.Sweep(ctx, idemstore.SweepRequest{Limit: g.cfg.SweepBatch, Now: g.now()})
		total += n
		if err != nil {
			return total, fmt.Errorf("%w: sweep: %w", ErrStore, err)
		}
		if n < g.cfg.SweepBatch {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
	}
}

// StartSweeper runs runSweeper in a goroutine of its own until the
// function it returns is called; that function stops the sweeper and waits
// for it to return, so that the store may be closed right after. Run one
// beside every Guard on a store that keeps expired records until swept
// (the SQL stores; MemoryStore deletes its own): a sweep deletes what
// expired in batches, safely from many replicas at once. It panics on an
// interval that is not positive.
//
//	stop := guard.StartSweeper(time.Minute, func(err error) { log.Print(err) })
//	defer stop() // before closing the store
func (g *Guard) StartSweeper(interval time.Duration, onError func(error)) (stop func()) {
	if interval <= 0 {
		panic("idemkit: StartSweeper needs a positive interval")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.runSweeper(ctx, interval, onError)
	}()
	return func() {
		cancel()
		<-done
	}
}

// runSweeper calls Sweep every interval until ctx is done, and returns
// ctx's error. Sweep errors are passed to onError (which may be nil) and do
// not stop the loop.
func (g *Guard) runSweeper(ctx context.Context, interval time.Duration, onError func(error)) error {
	if interval <= 0 {
		return errors.New("idemkit: runSweeper needs a positive interval")
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if _, err := g.Sweep(ctx); err != nil && onError != nil && ctx.Err() == nil {
				onError(err)
			}
		}
	}
}
