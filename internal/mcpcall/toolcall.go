package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// ToolCall is what a front end knows about one tools/call.
type ToolCall struct {
	// Tool is the tool name.
	Tool string
	// Arguments is the raw JSON of params.arguments.
	Arguments []byte
	// StrippedKey is the raw JSON value of the idempotency_key argument when
	// the front end removed it from Arguments before the call reached
	// CallTool (mcp-go does, before the SDK validates the arguments), or
	// nil.
	StrippedKey json.RawMessage
	// Meta is params._meta, or nil; an explicit key may be sent in it.
	Meta map[string]any
	// Info is what the front end knows about the tool.
	Info ToolInfo
	// Continuation marks a request that continues an earlier round of the
	// same call (it carries requestState or inputResponses).
	Continuation bool
	// Progress sends notifications/progress for this request, or is nil.
	Progress ProgressSender
	// Validator checks the arguments against the tool's input schema, or is
	// nil when the front end's SDK validated them already (or the tool has
	// none). A protected call whose arguments fail is answered with an
	// isError result and nothing is claimed.
	Validator *SchemaValidator
	// Decoded, when not nil, is the arguments the handler receives, decoded
	// already by the SDK (as encoding/json decodes into an any); Validator
	// checks it instead of decoding ValidatedArguments, unless they hold a
	// number whose float64 is integral while its exact value is not (see
	// SchemaValidator.ValidateDecoded).
	Decoded any
	// ValidatedArguments is the raw JSON of the arguments the handler
	// receives, which Validator checks (or, with Decoded, scans for
	// numbers). Defaults to Arguments.
	ValidatedArguments []byte
	// Elicit asks the client's user (a tool's Config.Confirm question), or
	// is nil when the front end cannot.
	Elicit Elicitor
	// Tx, when not nil, runs the call in a database transaction: a
	// protected call's claim, the handler's writes and the outcome commit
	// together (TxRunner.Claim); an unprotected call runs in a
	// transaction without a claim (TxRunner.Run).
	Tx TxRunner
}

// TxRunner runs a transactional tool's calls in database transactions
// (instrument.TxRunner adapts a store's DoInTx and InTx to it). The ctx it
// hands to the work carries the transaction, for the handler to find.
type TxRunner interface {
	// Claim runs work under key's claim with g in a new transaction, and
	// commits the claim, the work's writes and the outcome together. When
	// the transaction does not commit after work succeeded, it returns an
	// error matching ErrRolledBack: nothing of the call happened.
	Claim(ctx context.Context, g *idemkit.Guard, key idemkit.Key, work idemkit.Work) (idemkit.Result, error)
	// Run runs fn in a new transaction without a claim, committed when fn
	// returns nil. A commit that fails returns an error matching
	// ErrRolledBack.
	Run(ctx context.Context, fn func(ctx context.Context) error) error
}

// ErrRolledBack marks the failure of a transactional call whose work ran
// but whose transaction did not commit: nothing of it happened, and a
// retry is safe.
var ErrRolledBack = errors.New("the call's transaction did not commit: nothing of it happened")

// ProgressSender sends MCP progress notifications for one request.
type ProgressSender interface {
	SendProgress(ctx context.Context, progress, total float64, message string) error
}

// callFacts is what CallTool decided about a call, for the span and the
// metrics. Each field is written in one place.
type callFacts struct {
	args         []byte
	key          idemkit.Key
	scope        Scope
	bypass       string
	refusal      string
	attempt      int
	writeID      string
	claimTime    time.Duration
	finishErr    error
	finishReason string
	resultAttr   string
	confirm      string // the human gate's answer (ConfirmationAttr)

	// The small fields side by side, which keeps the Op that holds them
	// in a smaller size class.
	outcome        outcome
	ran            bool // CallTool ran on this Op
	claimed        bool
	recorded       bool // the answer was stored (or needs no storing)
	isError        bool
	inputRequested bool
	continuation   bool
}

// errNeedsInput marks a result that asks the client for more input: the
// claim is released, nothing is stored.
var errNeedsInput = errors.New("mcpcall: the result asks for more input")

// decision is how a call is served.
type decision uint8

const (
	decideBypass decision = iota
	decideRefuse
	decideProtect
)

// CallTool serves one tools/call of op through the protection: it decides
// the call's protection and scope, derives its key, claims it with the
// Guard and runs next at most once, and answers duplicates with the stored
// result plus a ReplayMetaKey marker, or with an isError result carrying a
// RefusalMetaKey marker (in progress, key mismatch, caller unidentified,
// invalid key or arguments, store unavailable). Every step is decided once,
// in this order; what was decided goes to the span and the metrics when op
// ends.
//
// next runs the tool handler with the context it is given (which carries
// op's call state and the idemkit.Call). A Go error from next is returned
// as it is and nothing is stored. A front end that re-invokes the handler
// within one request (mcp-go completes input rounds in-process) may call
// CallTool again on the same op: the last round's outcome is recorded, and
// the input flags of every round.
func CallTool[R any](op *Op, call *ToolCall, codec Codec[R], next func(context.Context) (R, error)) (R, error) {
	in := op.in
	op.SetTarget(call.Tool)
	c := &op.call
	*c = callFacts{ran: true, args: call.Arguments,
		inputRequested: c.inputRequested, continuation: c.continuation || call.Continuation}
	op.state.reset(call.Progress)
	// The functions a handler registered with OnRecorded run once the
	// outcome is settled (with false when the handler panics).
	defer func() { op.state.afterCall(c.recorded) }()

	c.scope = op.Scope()
	op.state.scope, op.state.hasSubject = c.scope.Value, c.scope.Kind == ScopeSubject
	op.state.scoped = c.scope.Kind != ScopeNone
	write := in.WriteTool(call.Tool, call.Info)
	var d decision
	switch {
	case !write:
		d, c.bypass = decideBypass, spancontract.BypassUnprotected
	case in.guard == nil:
		d, c.bypass = decideBypass, spancontract.BypassNoGuard
	default:
		switch {
		case c.scope.Kind != ScopeNone || in.cfg.Unscoped == UnscopedShare:
			d = decideProtect
		case in.cfg.Unscoped == UnscopedBypass:
			d, c.bypass = decideBypass, spancontract.BypassUnscoped
		default:
			d = decideRefuse
		}
	}

	switch d {
	case decideRefuse:
		in.logRefusedOnce(call.Tool)
		return refuse(op, codec, spancontract.RefusalUnscoped, unscopedText(call.Tool, in.cfg.UnscopedAdvice), nil), nil
	case decideBypass:
		c.outcome = outcomeBypassed
		if (write || !call.Info.ReadOnlyHint) && op.rec {
			// A tool that may write, run unprotected (no Guard, no scope,
			// or not protected: declared idempotent, or excluded by
			// WithProtect): record the hashes anyway, so that the
			// duplicates that leak are visible. Only declared reads go
			// without.
			if k, err := in.newKey(c.scope, call); err == nil {
				c.key = k
			}
		}
		var (
			res R
			err error
		)
		if call.Tx != nil {
			var committed bool
			if res, err, committed = runTx(op, call.Tx, next); !committed {
				// The transaction did not commit: nothing happened.
				c.finishErr, c.finishReason = err, spancontract.FinishStoreError
				return refuse(op, codec, spancontract.RefusalStoreUnavailable, rolledBackText(call.Tool), nil), nil
			}
		} else {
			res, err = next(op)
		}
		c.writeID = op.state.recordedWrite()
		c.recorded = err == nil
		return answer(op, codec, res, err, nil)
	}
	return protect(op, call, codec, next)
}

// runTx runs next, unprotected, in a transaction of tx, and reports whether
// the transaction committed or the handler's own error ended it. (Apart
// from CallTool, so that the state it shares with the transaction's
// closure is allocated only on this path.)
func runTx[R any](op *Op, tx TxRunner, next func(context.Context) (R, error)) (res R, err error, committed bool) {
	var herr error
	// Not bound to the request's cancellation: a client that hangs up does
	// not roll back a call half done.
	err = tx.Run(context.WithoutCancel(op), func(ctx context.Context) error {
		res, herr = next(ctx)
		return herr
	})
	return res, err, err == nil || herr != nil
}

// protect runs a protected call through the Guard.
func protect[R any](op *Op, call *ToolCall, codec Codec[R], next func(context.Context) (R, error)) (R, error) {
	in := op.in
	c := &op.call
	if v := call.Validator; v != nil {
		var err error
		raw := call.ValidatedArguments
		if raw == nil {
			raw = call.Arguments
		}
		if call.Decoded != nil {
			err = v.ValidateDecoded(call.Decoded, raw)
		} else {
			err = v.Validate(raw)
		}
		if err != nil {
			return refuse(op, codec, spancontract.RefusalInvalidArguments, rejectedText(call.Tool, err), nil), nil
		}
	}
	key, err := in.newKey(c.scope, call)
	if _, ok := errors.AsType[*policyError](err); ok {
		return refuse(op, codec, spancontract.RefusalMisconfigured, policyText(call.Tool), nil), nil
	}
	if err != nil {
		reason := spancontract.RefusalInvalidArguments
		if errors.Is(err, idemkit.ErrInvalidKey) {
			reason = spancontract.RefusalInvalidKey
		}
		return refuse(op, codec, reason, rejectedText(call.Tool, err), nil), nil
	}
	c.key = key
	if text := in.missingKey(call.Tool, key); text != "" {
		return refuse(op, codec, RefusalMissingKey, text, nil), nil
	}
	g, reason, text := in.gateOf(call, c)
	if reason != "" {
		return refuse(op, codec, reason, text, nil), nil
	}

	w := work[R]{op: op, codec: codec, next: next, gate: g}
	claimStart := time.Now()
	var (
		r    idemkit.Result
		derr error
	)
	if call.Tx == nil {
		r, derr = in.guard.Do(op, key, w.run)
	} else {
		r, derr = claimTx(op, call.Tx, key, &w)
	}
	ran, attempt, handlerRes, handlerErr, body := w.ran, w.attempt, w.handlerRes, w.handlerErr, w.body
	c.claimed = true
	if ran {
		c.claimTime = w.start.Sub(claimStart)
	} else {
		c.claimTime = time.Since(claimStart)
	}
	if ran && w.unencodable != nil {
		return unencodable(op, call, codec, &w, derr), nil
	}

	switch {
	case derr == nil && r.Outcome == idemkit.OutcomeReplayed:
		c.outcome, c.attempt, c.writeID = outcomeReplayed, r.Attempt, r.WriteID
		stored, uerr := codec.Unmarshal(r.Body)
		if uerr != nil {
			c.finishErr = uerr
			return refuse(op, codec, spancontract.RefusalResultUnreadable, unreadableText(call.Tool), nil), nil
		}
		return answer(op, codec, codec.WithMeta(stored, spancontract.ReplayMetaKey, replayMarker(r.Attempt, r.WriteID)), nil, r.Body)
	case derr == nil:
		c.outcome, c.attempt, c.writeID = ranOutcome(r.Outcome), r.Attempt, r.WriteID
		c.recorded = true
		if ran && !r.IsError {
			op.ta.duration.observe(w.took)
		}
		return answer(op, codec, handlerRes, nil, body)
	case ran && errors.Is(derr, ErrLocalRolledBack):
		// A phased call's local transaction did not commit: none of its
		// writes remain, its claim was released (or another attempt took
		// it over), and its external work used the call's key.
		c.outcome, c.attempt, c.writeID = outcomeNone, 0, ""
		c.finishErr, c.finishReason = derr, finishReason(derr)
		return refuse(op, codec, spancontract.RefusalStoreUnavailable, localRolledBackText(call.Tool), nil), nil
	case ran && w.gated(derr):
		// The user was asked and did not accept (or could not be asked):
		// the claim is released, nothing ran.
		ge, _ := asGateError(derr)
		c.outcome, c.writeID = outcomeNone, ""
		return refuse(op, codec, ge.reason, ge.text, nil), nil
	case ran && errors.Is(derr, ErrRolledBack) && (handlerErr == nil || !errors.Is(derr, handlerErr)):
		// The work ran in a transaction that did not commit: neither its
		// writes nor its claim remain, so nothing happened.
		c.outcome, c.attempt, c.writeID = outcomeNone, 0, ""
		c.finishErr, c.finishReason = derr, spancontract.FinishStoreError
		return refuse(op, codec, spancontract.RefusalStoreUnavailable, rolledBackText(call.Tool), nil), nil
	case ran:
		// The work ran: its own error, a request for input, or an outcome
		// that could not be recorded (the result is still delivered).
		c.attempt, c.outcome = attempt, outcomeExecuted
		if attempt > 1 {
			c.outcome = outcomeTakeover
		}
		c.writeID = op.state.recordedWrite()
		switch {
		case handlerErr != nil && errors.Is(derr, handlerErr):
			// The work's own error; when releasing the claim after it
			// failed too, that is recorded as well.
			if _, ok := errors.AsType[*idemkit.FinishError](derr); ok {
				c.finishErr, c.finishReason = derr, finishReason(derr)
			}
			var zero R
			return answer(op, codec, zero, handlerErr, nil)
		case errors.Is(derr, errNeedsInput):
			c.inputRequested = true
			return answer(op, codec, handlerRes, nil, nil)
		}
		c.finishErr, c.finishReason = derr, finishReason(derr)
		return answer(op, codec, handlerRes, nil, body)
	}
	if inProgress, ok := errors.AsType[*idemkit.InProgressError](derr); ok {
		c.outcome, c.attempt = outcomeInProgress, inProgress.Attempt
		e := *inProgress
		if e.StatusTool == "" {
			e.StatusTool = in.statusToolOf(call.Tool, call.Info)
		}
		hint := op.ta.duration.retryAfter(&e, time.Now())
		text := e.Error()
		if e.StatusTool != "" && e.StatusTool == in.CallStatusTool() {
			text += " " + callStatusHint(e.StatusTool, call.Tool)
		}
		return refuse(op, codec, spancontract.RefusalInProgress, text, inProgressMarker(&e, hint)), nil
	}
	if mismatch, ok := errors.AsType[*idemkit.MismatchError](derr); ok {
		c.outcome = outcomeMismatch
		return refuse(op, codec, spancontract.RefusalMismatch, mismatch.Error(), nil), nil
	}
	if errors.Is(derr, idemkit.ErrAttemptsExhausted) {
		// A poison call: its attempts failed MaxAttempts times; this one
		// ran nothing.
		return refuse(op, codec, RefusalAttemptsExhausted, derr.Error(), nil), nil
	}
	if tooLarge, ok := errors.AsType[*idemkit.ResponseTooLargeError](derr); ok {
		c.outcome = outcomeReplayed
		return refuse(op, codec, spancontract.RefusalResponseNotKept, tooLarge.Error(), nil), nil
	}
	if damaged, ok := errors.AsType[*idemkit.RecordDamagedError](derr); ok {
		// The call ran; its stored answer cannot be read (the Guard logged
		// why). Never "nothing was done", never a re-run.
		c.outcome, c.attempt, c.finishErr = outcomeReplayed, damaged.Attempt, derr
		return refuse(op, codec, spancontract.RefusalResultUnreadable, unreadableText(call.Tool), nil), nil
	}
	if full, ok := errors.AsType[*idemstore.StoreFullError](derr); ok {
		c.finishErr = derr
		return refuse(op, codec, spancontract.RefusalStoreFull, storeFullText(call.Tool), storeFullMarker(full)), nil
	}
	// The claim failed (store unreachable, ctx cancelled): fail closed,
	// never run the work unprotected.
	c.finishErr = derr
	return refuse(op, codec, spancontract.RefusalStoreUnavailable, unavailableText(call.Tool), nil), nil
}

// unencodable answers a protected call whose work ran and whose result
// could not be encoded (a NaN in structuredContent): neither the SDK nor the
// store can carry it. The call is recorded as done without its result
// (idemkit.Response.NotKept), so every retry within the window is answered
// response_not_kept and nothing runs again; the caller gets an isError
// answer saying that the work is done, with the same RefusalMetaKey
// reason. A tool-error result that does not encode is released, as tool
// errors are by default (its retry runs again), and a transactional call's
// transaction rolls back (nothing of it remains); their answers say so.
func unencodable[R any](op *Op, call *ToolCall, codec Codec[R], w *work[R], derr error) R {
	c := &op.call
	c.attempt, c.outcome = w.attempt, outcomeExecuted
	if w.attempt > 1 {
		c.outcome = outcomeTakeover
	}
	c.writeID = op.state.recordedWrite()
	c.finishErr, c.finishReason = w.unencodable, spancontract.FinishUnencodable
	c.isError = true
	var kind unencodableKind
	switch {
	case errors.Is(derr, ErrRolledBack):
		kind = unencodableRolledBack
		c.outcome, c.attempt, c.writeID = outcomeNone, 0, ""
		c.finishErr = errors.Join(w.unencodable, derr)
	case errors.Is(derr, idemkit.ErrResponseTooLarge):
		kind = unencodableKept
		c.recorded = true
	default: // a tool error, released; or recording the call failed
		kind = unencodableReleased
		if derr != nil {
			c.finishErr = errors.Join(w.unencodable, derr)
		}
	}
	res := codec.ErrorResult(unencodableText(call.Tool, w.unencodable, kind))
	if kind == unencodableKept {
		res = codec.WithMeta(res, spancontract.RefusalMetaKey, map[string]any{"reason": spancontract.RefusalResponseNotKept})
	}
	return res
}

// work is a protected call's work for the Guard, and what it learned. It
// lives on protect's stack: the Guard does not keep the function it runs.
type work[R any] struct {
	op    *Op
	codec Codec[R]
	next  func(context.Context) (R, error)
	gate  *gate // the question to ask first, or nil

	ran         bool
	attempt     int
	start       time.Time
	took        time.Duration // how long the handler ran
	unencodable error         // the handler's result could not be encoded
	handlerRes  R
	handlerErr  error
	gateErr     error // the gate's refusal, when the question ended the work
	body        []byte
}

// gated reports whether derr is the gate's refusal of the work.
func (w *work[R]) gated(derr error) bool {
	return w.gateErr != nil && errors.Is(derr, w.gateErr)
}

func (w *work[R]) run(wctx context.Context) (idemkit.Response, error) {
	op, c, codec := w.op, &w.op.call, w.codec
	w.start, w.ran = time.Now(), true
	w.attempt = idemkit.CallFromContext(wctx).Attempt()
	// Known now, in case the handler panics: the span then still says
	// that the work ran.
	c.attempt, c.outcome = w.attempt, outcomeExecuted
	if w.attempt > 1 {
		c.outcome = outcomeTakeover
	}
	if w.gate != nil {
		if err := w.gate.ask(wctx, c); err != nil {
			w.gateErr = err
			return idemkit.Response{}, err
		}
	}
	w.handlerRes, w.handlerErr = w.next(wctx)
	w.took = time.Since(w.start)
	if w.handlerErr != nil {
		return idemkit.Response{}, w.handlerErr
	}
	if codec.NeedsInput(w.handlerRes) {
		return idemkit.Response{}, errNeedsInput
	}
	b, merr := codec.Marshal(w.handlerRes)
	if merr != nil {
		// The work ran, and its result cannot be stored (nor sent): it is
		// recorded as done without a body, as a result too large to keep
		// is, so that a retry is answered response_not_kept instead of
		// running the work again.
		w.unencodable = &unencodableError{merr}
		return idemkit.Response{NotKept: true, WriteID: op.state.recordedWrite(), IsError: codec.IsError(w.handlerRes)}, nil
	}
	w.body = b
	return idemkit.Response{Body: b, WriteID: op.state.recordedWrite(), IsError: codec.IsError(w.handlerRes)}, nil
}

// claimTx runs w under key's claim in a transaction of tx. The transaction
// runner keeps its work function, so w's state moves to the heap for it
// (only on this path).
func claimTx[R any](op *Op, tx TxRunner, key idemkit.Key, w *work[R]) (idemkit.Result, error) {
	h := new(work[R])
	*h = *w
	// The transaction is not bound to the request's cancellation: a
	// client that hangs up does not roll back a call half done; it
	// completes, and its outcome is stored for the retry.
	r, err := tx.Claim(context.WithoutCancel(op), op.in.guard, key, h.run)
	*w = *h
	return r, err
}

func ranOutcome(o idemkit.Outcome) outcome {
	if o == idemkit.OutcomeTakeover {
		return outcomeTakeover
	}
	return outcomeExecuted
}

// answer records how the call's result looks (isError, the optional result
// attribute) and returns it. body is the result's wire JSON when at hand.
func answer[R any](op *Op, codec Codec[R], res R, err error, body []byte) (R, error) {
	c := &op.call
	if err != nil {
		return res, err
	}
	c.isError = codec.IsError(res)
	if op.rec && op.in.cfg.ResultCap > 0 {
		if body == nil {
			body, _ = codec.Marshal(res)
		}
		c.resultAttr = capture(body, op.in.cfg.ResultCap)
	}
	return res, nil
}

// refuse returns the isError answer idemkit gives instead of running the
// tool: text for the model, and a RefusalMetaKey marker with reason (plus
// extra's entries) for a client.
func refuse[R any](op *Op, codec Codec[R], reason, text string, extra map[string]any) R {
	c := &op.call
	c.refusal, c.isError = reason, true
	marker := map[string]any{"reason": reason}
	for k, v := range extra {
		marker[k] = v
	}
	return codec.WithMeta(codec.ErrorResult(text), spancontract.RefusalMetaKey, marker)
}

// unencodableError marks a result that could not be encoded for storage.
type unencodableError struct{ err error }

func (e *unencodableError) Error() string { return "the result could not be encoded: " + e.err.Error() }
func (e *unencodableError) Unwrap() error { return e.err }

func isUnencodable(err error) bool {
	_, ok := errors.AsType[*unencodableError](err)
	return ok
}

// finishReason classifies a failed finish for idemkit.finish.error.
func finishReason(err error) string {
	switch {
	case isUnencodable(err):
		return spancontract.FinishUnencodable
	case errors.Is(err, idemkit.ErrResponseTooLarge):
		return spancontract.FinishResponseTooLarge
	case errors.Is(err, idemkit.ErrLeaseLost):
		return spancontract.FinishLeaseLost
	}
	return spancontract.FinishStoreError
}

// newKey derives a call's key in scope sc. The key argument is taken out of
// the arguments here, so that a malformed one is an invalid key whatever
// the front end did with it.
func (in *Instrumenter) newKey(sc Scope, call *ToolCall) (idemkit.Key, error) {
	args, stripped := call.Arguments, call.StrippedKey
	if stripped == nil {
		args, stripped = StripKeyArgument(args)
	}
	explicit, err := explicitKey(call.Meta, stripped)
	if err != nil {
		return idemkit.Key{}, err
	}
	if err := in.badPolicies[call.Tool]; err != nil {
		return idemkit.Key{}, &policyError{err}
	}
	opts := idemkit.KeyOptions{ExplicitKey: explicit, Exclude: in.cfg.Exclude[call.Tool], Round: in.cfg.Round[call.Tool]}
	return idemkit.NewKey(in.versionedScope(keyScope(sc), call.Tool), call.Tool, args, &opts)
}
