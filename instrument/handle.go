package instrument

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/spancontract"
)

// callResult collects what Handle learned about a call, for the span and
// the metrics.
type callResult struct {
	outcome   outcome
	attempt   int
	writeID   string
	claimed   bool          // the claim was attempted
	claimTime time.Duration // claim start to work start (or to the answer)
	isError   bool          // the client gets an isError result
	err       error         // an error to record on the span (and set error.type)
	errType   string        // error.type; tool_error when isError and err is nil
	body      []byte        // the result's wire JSON when already at hand
	reason    string        // bypass reason
	key       idemkit.Key   // the call's key, when derived
	scope     string        // the scope the key was derived in
}

// Handle runs one tools/call through the Instrumenter: it starts the
// execute_tool span (parented on the trace context in call.Meta when the
// client sent one), decides whether the tool is protected, and either runs
// next directly (outcome "bypassed") or claims the call's key with the Guard
// and runs next at most once, answering duplicates with the stored result
// plus a ReplayMetaKey marker, or with an in-progress isError result. It then
// ends the span and records the metrics.
//
// next runs the tool handler with the context it is given (which carries the
// span, RecordWrite's state and the idemkit.Call). A Go error from next is
// returned as it is (and nothing is stored); every answer idemkit produces
// itself (in progress, key mismatch, invalid key, store unavailable) is an
// isError result built with codec.ErrorResult, never a Go error, so that a
// model reads it. SDK adapters call Handle from their middleware; ctx bounds
// the claim and the handler.
func Handle[R any](ctx context.Context, in *Instrumenter, call *ToolCall, codec Codec[R], next func(context.Context) (R, error)) (R, error) {
	start := time.Now()
	ta := in.toolAttrs(call.Tool)

	ctx, link := in.extract(ctx, call.Meta)
	opts := ta.startOpts
	if link.IsValid() {
		opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: link}))
	}
	ctx, span := in.tracer.Start(ctx, ta.spanName, opts...)
	rec := span.IsRecording()
	ended := false
	defer func() {
		if !ended { // the handler panicked: end the span, let the panic go on
			span.SetStatus(codes.Error, "panic")
			span.End()
		}
	}()

	st := &callState{Context: ctx, progress: call.Progress}
	in.scope(ctx, call, st)
	ctx = st

	var (
		res R
		err error
		cr  callResult
	)
	switch {
	case in.guard == nil && in.writeTool(call.Tool, call.ReadOnlyHint, call.IdempotentHint):
		// Observe-only: no protection, but the key hashes are recorded so
		// that the Collector measures the duplicates that leak.
		cr.outcome, cr.reason = outcomeBypassed, spancontract.BypassNoGuard
		if rec {
			if k, kerr := in.newKey(st.scope, call); kerr == nil {
				cr.key, cr.scope = k, st.scope
			}
		}
		res, err = next(ctx)
	case !in.Protects(call.Tool, call.ReadOnlyHint, call.IdempotentHint):
		cr.outcome, cr.reason = outcomeBypassed, spancontract.BypassUnprotected
		res, err = next(ctx)
	case !st.scoped && in.cfg.unscoped == UnscopedBypass:
		cr.outcome, cr.reason = outcomeBypassed, spancontract.BypassUnscoped
		if rec {
			// Record the hashes anyway, so that leaked duplicates are visible.
			if k, kerr := in.newKey(st.scope, call); kerr == nil {
				cr.key, cr.scope = k, st.scope
			}
		}
		res, err = next(ctx)
	default:
		res, err = protect(ctx, in, call, codec, next, st, &cr)
	}
	if cr.outcome == outcomeBypassed || (cr.writeID == "" && cr.outcome != outcomeReplayed) {
		cr.writeID = st.recordedWrite()
	}
	if err == nil && cr.err == nil && !cr.isError {
		cr.isError = codec.IsError(res)
	}
	var resultAttr string
	if rec && in.cfg.resultCap > 0 && err == nil {
		b := cr.body
		if b == nil {
			b, _ = codec.Marshal(res)
		}
		resultAttr = capture(b, in.cfg.resultCap)
	}
	ended = true
	in.finish(ctx, span, rec, ta, call, &cr, err, start, resultAttr)
	return res, err
}

func (in *Instrumenter) newKey(scope string, call *ToolCall) (idemkit.Key, error) {
	explicit, err := explicitKey(call.Meta)
	if err != nil {
		return idemkit.Key{}, err
	}
	opts := idemkit.KeyOptions{ExplicitKey: explicit, Exclude: in.cfg.exclude[call.Tool]}
	return idemkit.NewKey(scope, call.Tool, call.Arguments, &opts)
}

// protect runs a protected call through the Guard.
func protect[R any](ctx context.Context, in *Instrumenter, call *ToolCall, codec Codec[R], next func(context.Context) (R, error),
	st *callState, cr *callResult) (R, error) {
	var zero R
	key, err := in.newKey(st.scope, call)
	if err != nil {
		cr.isError, cr.errType = true, spancontract.ErrorTypeToolError
		cr.err = err
		return codec.ErrorResult(rejectedText(call.Tool, err)), nil
	}
	cr.key, cr.scope = key, st.scope

	var (
		ran        bool
		workStart  time.Time
		handlerRes R
		handlerErr error
	)
	claimStart := time.Now()
	cr.claimed = true
	r, derr := in.guard.Do(ctx, key, func(wctx context.Context) (idemkit.Response, error) {
		workStart = time.Now()
		ran = true
		cr.attempt = idemkit.CallFromContext(wctx).Attempt()
		handlerRes, handlerErr = next(wctx)
		if handlerErr != nil {
			return idemkit.Response{}, handlerErr
		}
		if codec.NeedsInput(handlerRes) {
			return idemkit.Response{}, errNeedsInput
		}
		body, merr := codec.Marshal(handlerRes)
		if merr != nil {
			return idemkit.Response{}, merr
		}
		cr.body = body
		return idemkit.Response{Body: body, WriteID: st.recordedWrite(), IsError: codec.IsError(handlerRes)}, nil
	})
	if ran {
		cr.claimTime = workStart.Sub(claimStart)
		cr.outcome = outcomeExecuted
		if cr.attempt > 1 {
			cr.outcome = outcomeTakeover
		}
	} else {
		cr.claimTime = time.Since(claimStart)
	}

	if derr == nil {
		cr.attempt = r.Attempt
		switch r.Outcome {
		case idemkit.OutcomeReplayed:
			cr.outcome = outcomeReplayed
			cr.writeID = r.WriteID
			cr.body = r.Body
			stored, uerr := codec.Unmarshal(r.Body)
			if uerr != nil {
				cr.isError, cr.err = true, uerr
				return codec.ErrorResult(unreadableText(call.Tool)), nil
			}
			cr.isError = r.IsError
			return codec.WithMeta(stored, ReplayMetaKey, replayMarker(r.Attempt, r.WriteID)), nil
		case idemkit.OutcomeTakeover:
			cr.outcome = outcomeTakeover
		default:
			cr.outcome = outcomeExecuted
		}
		cr.writeID = r.WriteID
		return handlerRes, nil
	}

	if ran {
		switch {
		case handlerErr != nil && errors.Is(derr, handlerErr):
			// The handler's own error: nothing was stored; pass it through.
			return zero, handlerErr
		case errors.Is(derr, errNeedsInput):
			cr.body = nil
			return handlerRes, nil
		}
		// The work ran but its outcome could not be recorded (store failure,
		// lease lost, response too large, unmarshalable result): the client
		// still gets the work's result; the span records the failure.
		cr.writeID = st.recordedWrite()
		cr.err = derr
		return handlerRes, nil
	}

	var (
		inProgress *idemkit.InProgressError
		mismatch   *idemkit.MismatchError
		tooLarge   *idemkit.ResponseTooLargeError
	)
	switch {
	case errors.As(derr, &inProgress):
		e := *inProgress
		if e.StatusTool == "" {
			e.StatusTool = in.StatusTool(call.Tool)
		}
		cr.outcome, cr.attempt = outcomeInProgress, e.Attempt
		cr.isError, cr.errType = true, spancontract.ErrorTypeToolError
		return codec.ErrorResult(e.Error()), nil
	case errors.As(derr, &mismatch):
		cr.outcome = outcomeMismatch
		cr.isError, cr.errType = true, spancontract.ErrorTypeToolError
		return codec.ErrorResult(mismatch.Error()), nil
	case errors.As(derr, &tooLarge):
		cr.outcome = outcomeReplayed
		cr.isError, cr.errType = true, spancontract.ErrorTypeToolError
		return codec.ErrorResult(tooLarge.Error()), nil
	default:
		// The claim failed (store unreachable, ctx cancelled): fail closed,
		// never run the work unprotected.
		cr.isError, cr.err = true, derr
		return codec.ErrorResult(unavailableText(call.Tool)), nil
	}
}

func replayMarker(attempt int, writeID string) map[string]any {
	m := map[string]any{"replayed": true, "attempt": attempt}
	if writeID != "" {
		m["write_id"] = writeID
	}
	return m
}

func rejectedText(tool string, err error) string {
	reason := strings.TrimPrefix(err.Error(), "idemkit: ")
	return "The " + tool + " call was rejected and nothing was done: " + reason +
		". Fix the request and call " + tool + " again."
}

func unavailableText(tool string) string {
	return "The " + tool + " call was not run: the server could not check whether this request already ran, because its idempotency store is unavailable. " +
		"Nothing was done. Retry the same call in a few seconds."
}

func unreadableText(tool string) string {
	return "The " + tool + " call with these arguments already ran, but its stored result could not be read. " +
		"Do not call it again: the work is done."
}

// requestAttributes appends the request attributes of a recording span.
func (in *Instrumenter) requestAttributes(attrs []attribute.KeyValue, call *ToolCall) []attribute.KeyValue {
	if call.SessionID != "" {
		attrs = append(attrs, attribute.String(spancontract.MCPSessionID, call.SessionID))
	}
	if call.RequestID != "" {
		attrs = append(attrs, attribute.String(spancontract.JSONRPCRequestID, call.RequestID))
	}
	if call.ProtocolVersion != "" {
		attrs = append(attrs, attribute.String(spancontract.MCPProtocolVersion, call.ProtocolVersion))
	}
	if in.cfg.argsCap > 0 && len(call.Arguments) > 0 {
		attrs = append(attrs, attribute.String(spancontract.GenAIToolCallArguments, capture(call.Arguments, in.cfg.argsCap)))
	}
	return attrs
}

// keyAttributes appends the idemkit key attributes of a recording span.
func (in *Instrumenter) keyAttributes(attrs []attribute.KeyValue, key idemkit.Key, scope string) []attribute.KeyValue {
	attrs = append(attrs,
		attribute.String(spancontract.ArgsHash, key.ArgsHash()[:spancontract.HashLen]),
		attribute.String(spancontract.KeyHash, in.keyHash(key)),
		attribute.String(spancontract.KeySource, key.Source()),
	)
	if scope != "" {
		attrs = append(attrs, attribute.String(spancontract.SubjectHash, in.hashSubject(scope)))
		if in.cfg.rawSubject && !strings.HasPrefix(scope, sessionScopePrefix) {
			attrs = append(attrs, attribute.String(spancontract.Subject, scope))
		}
	}
	return attrs
}

// attrPool recycles the attribute buffers of finish.
var attrPool = sync.Pool{New: func() any {
	b := make([]attribute.KeyValue, 0, 16)
	return &b
}}

// finish sets the outcome attributes, ends the span and records metrics.
func (in *Instrumenter) finish(ctx context.Context, span trace.Span, rec bool, ta *toolAttrs, call *ToolCall,
	cr *callResult, err error, start time.Time, resultAttr string) {
	errType := ""
	switch {
	case err != nil:
		errType = errorType(err)
	case cr.err != nil:
		errType = errorType(cr.err)
		if cr.errType != "" {
			errType = cr.errType
		}
	case cr.isError:
		errType = spancontract.ErrorTypeToolError
	}

	if rec {
		// One SetAttributes call: the span's attribute slice grows once. The
		// SDK copies the attributes, so the buffer goes back to the pool.
		buf := attrPool.Get().(*[]attribute.KeyValue)
		attrs := (*buf)[:0]
		attrs = in.requestAttributes(attrs, call)
		if !cr.key.IsZero() {
			attrs = in.keyAttributes(attrs, cr.key, cr.scope)
		}
		if cr.outcome != outcomeNone {
			attrs = append(attrs, outcomeAttrs[cr.outcome])
		}
		if cr.reason != "" && (in.guard != nil || cr.reason == spancontract.BypassNoGuard) {
			attrs = append(attrs, attribute.String(spancontract.BypassReason, cr.reason))
		}
		if cr.attempt > 0 {
			attrs = append(attrs, attribute.Int(spancontract.Attempt, cr.attempt))
		}
		if cr.writeID != "" {
			attrs = append(attrs, attribute.String(spancontract.WriteID, cr.writeID))
		}
		if errType != "" {
			attrs = append(attrs, attribute.String(spancontract.ErrorType, errType))
		}
		if resultAttr != "" {
			attrs = append(attrs, attribute.String(spancontract.GenAIToolCallResult, resultAttr))
		}
		span.SetAttributes(attrs...)
		clear(attrs) // drop references to strings before pooling
		*buf = attrs[:0]
		attrPool.Put(buf)
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case cr.err != nil:
			span.RecordError(cr.err)
			span.SetStatus(codes.Error, cr.err.Error())
		case cr.isError:
			span.SetStatus(codes.Error, spancontract.ErrorTypeToolError)
		}
	}
	span.End()

	m := &in.m
	callOpts := ta.callOpts[cr.outcome]
	if cr.outcome == outcomeBypassed && (in.guard != nil || cr.reason == spancontract.BypassNoGuard) {
		if i := slices.Index(bypassReasons[:], cr.reason); i >= 0 {
			callOpts = ta.bypassOpts[i]
		}
	}
	m.calls.Add(ctx, 1, callOpts...)
	if cr.claimed {
		m.claim.Record(ctx, cr.claimTime.Seconds(), ta.toolRecord...)
	}
	switch cr.outcome {
	case outcomeReplayed:
		m.replays.Add(ctx, 1, ta.toolAdd...)
	case outcomeInProgress:
		m.inProgress.Add(ctx, 1, ta.toolAdd...)
	}
	if !in.cfg.opDuration {
		return
	}
	d := time.Since(start).Seconds()
	switch errType {
	case "":
		m.op.Record(ctx, d, ta.opOK...)
	case spancontract.ErrorTypeToolError:
		m.op.Record(ctx, d, ta.opToolErr...)
	default:
		m.op.Record(ctx, d, metric.WithAttributes(attrMethod, ta.nameAttr, attribute.String(spancontract.ErrorType, errType)))
	}
}
