package mcpcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// The call status tool: one read-only tool, served the same way by the SDK
// adapters (instrument.WithCallStatusTool) and the idemkit gateway, that
// answers a caller's own record of a protected call, found by the call's
// tool and arguments (or its explicit key) exactly as a duplicate of the
// call would find it. It never claims: a call of it changes nothing.

// DefaultCallStatusTool is the call status tool's name unless configured
// otherwise.
const DefaultCallStatusTool = "idemkit_call_status"

// CallStatusMetaKey marks a call status answer: {"state": "…", "tool":
// "…"} plus, in progress, "attempt", "started", "retry_after_ms" (when to
// ask again) and "lease_expires_in_ms"; the states are the CallState
// values.
const CallStatusMetaKey = spancontract.CallStatusMetaKey

// The states a call status answer reports.
const (
	// CallInProgress: an attempt runs, its lease holds.
	CallInProgress = "in_progress"
	// CallAbandoned: an attempt's lease ran out without an outcome (its
	// worker stopped); the next call takes it over.
	CallAbandoned = "abandoned"
	// CallCompleted: the outcome is stored; the answer is the stored result,
	// replayed (with ReplayMetaKey), as a duplicate would get it.
	CallCompleted = "completed"
	// CallReleased: the last attempt ended without a stored outcome (an
	// error, a cancellation); the next call runs again.
	CallReleased = "released"
	// CallUnknown: no record: never called by this caller, or its window
	// ended.
	CallUnknown = "unknown"
	// CallMismatch: the explicit key names a call with other arguments.
	CallMismatch = "mismatch"
	// CallNotRecorded: the tool's calls are not protected, so none is
	// recorded (or there is no such tool).
	CallNotRecorded = "not_recorded"
)

// CallStatusToolInfo is the call status tool's ToolInfo: read-only.
var CallStatusToolInfo = ToolInfo{ReadOnlyHint: true, IdempotentHint: true}

// CallStatusDescription is the call status tool's description.
const CallStatusDescription = "Reports what became of your own earlier call of another tool, without running anything: " +
	"still in progress (with when to ask again), completed (then it returns that call's stored result), failed and released (a new call runs again), or unknown. " +
	"Give the tool's name and the same arguments you called it with (or, as key, the idempotency_key you sent). " +
	"Call this instead of repeating a call you were told is in progress."

// CallStatusSchema returns the call status tool's input schema, a fresh
// map on every call.
func CallStatusSchema() map[string]any {
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"tool": map[string]any{"type": "string", "description": "The name of the tool whose call to report on."},
			"arguments": map[string]any{"type": "object",
				"description": "The arguments of that call, as you sent them. Leave them out only when you give its key."},
			"key": map[string]any{"type": "string", "maxLength": idemkit.MaxExplicitKeyLen,
				"description": "The idempotency_key the call was sent with, if any."},
		},
		"required": []any{"tool"},
	}
}

// CallStatusAnnotations is the call status tool's annotations object.
func CallStatusAnnotations() map[string]any {
	return map[string]any{"readOnlyHint": true, "idempotentHint": true, "destructiveHint": false, "openWorldHint": false}
}

// CallStatusToolJSON returns the call status tool as a tools/list entry
// named name.
func CallStatusToolJSON(name string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"name":        name,
		"description": CallStatusDescription,
		"inputSchema": CallStatusSchema(),
		"annotations": CallStatusAnnotations(),
	})
	return b
}

// CallStatusTool returns the name of the call status tool the front end
// serves, or "" when it serves none.
func (in *Instrumenter) CallStatusTool() string {
	if in.guard == nil {
		return ""
	}
	return in.cfg.CallStatusTool
}

// callStatusArgs are the call status tool's arguments.
type callStatusArgs struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Key       json.RawMessage `json:"key"`
}

// CallStatus answers a call of the call status tool served on op, with
// args its raw arguments: the record of the call it names, in op's
// caller's scope, read with the Guard's Lookup (never a claim). toolInfo
// says what the front end knows of a tool, and whether there is one. A
// completed call is answered with its stored result and ReplayMetaKey, as
// a duplicate would be; every other answer is text for the model and a
// CallStatusMetaKey marker (isError when the request cannot be answered:
// malformed, an unidentified caller, the store unreachable).
func CallStatus[R any](op *Op, codec Codec[R], args json.RawMessage, toolInfo func(tool string) (ToolInfo, bool)) R {
	in := op.in
	self := in.cfg.CallStatusTool
	fail := func(text string) R {
		return codec.WithMeta(codec.ErrorResult(text), CallStatusMetaKey, map[string]any{"state": "rejected"})
	}
	var a callStatusArgs
	if len(bytes.TrimSpace(args)) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return fail("The " + self + " call was rejected: its arguments must be an object with \"tool\" (a string), \"arguments\" (an object) and \"key\" (a string). Fix them and call " + self + " again.")
		}
	}
	if a.Tool == "" {
		return fail("The " + self + " call was rejected: give \"tool\", the name of the tool whose call to report on, and that call's \"arguments\".")
	}
	hasArgs := nonEmptyJSON(a.Arguments)
	hasKey := nonEmptyJSON(a.Key)
	if !hasArgs && !hasKey {
		return fail("The " + self + " call was rejected: give the " + a.Tool + " call's \"arguments\" (as you sent them), or, as \"key\", the idempotency_key you sent it with.")
	}
	if hasArgs && bytes.TrimSpace(a.Arguments)[0] != '{' {
		return fail("The " + self + " call was rejected: \"arguments\" must be an object, the " + a.Tool + " call's arguments as you sent them.")
	}
	status := func(state, text string, extra map[string]any) R {
		m := map[string]any{"state": state, "tool": a.Tool}
		for k, v := range extra {
			m[k] = v
		}
		return codec.WithMeta(TextResult(codec, text, nil, false), CallStatusMetaKey, m)
	}
	info, exists := toolInfo(a.Tool)
	switch {
	case a.Tool == self:
		return status(CallNotRecorded, self+" reports on other tools' calls; its own calls are not recorded.", nil)
	case !exists:
		return status(CallNotRecorded, "There is no tool named "+a.Tool+" on this server, so no call of it is on record.", nil)
	case !in.WriteTool(a.Tool, info):
		return status(CallNotRecorded, a.Tool+"'s calls are not protected here (it is read-only or idempotent), so none is on record: call it again for a fresh result.", nil)
	}
	sc := op.Scope()
	if sc.Kind == ScopeNone && in.cfg.Unscoped != UnscopedShare {
		return codec.WithMeta(codec.ErrorResult("This server cannot tell which caller sent this "+self+" request, so it cannot show it any call's record. "+
			"Send it again with the caller's credentials."), CallStatusMetaKey, map[string]any{"state": spancontract.RefusalUnscoped, "tool": a.Tool})
	}
	callArgs := a.Arguments
	if !hasArgs {
		callArgs = json.RawMessage(`{}`)
	}
	var stripped json.RawMessage
	if hasKey {
		stripped = a.Key
	}
	key, err := in.newKey(sc, &ToolCall{Tool: a.Tool, Arguments: callArgs, StrippedKey: stripped})
	if err != nil {
		return fail("The " + self + " call was rejected: " + strings.TrimPrefix(err.Error(), "idemkit: ") + ". Fix it and call " + self + " again.")
	}
	var rec idemstore.Record
	if hasArgs || key.Source() != spancontract.KeySourceExplicit {
		rec, err = in.guard.Lookup(op, key)
	} else {
		// An explicit key alone: the record of that key, whatever the
		// arguments it was made with (the key is in this caller's scope).
		g := in.guard
		var now time.Time
		if c := g.Config(); c.Now != nil {
			now = c.Now()
		}
		rec, err = g.Store().Lookup(op, idemstore.LookupRequest{Key: key.ID(), Body: true, Now: now})
	}
	if _, ok := errors.AsType[*idemkit.MismatchError](err); ok {
		return status(CallMismatch, "The key you gave was used for a "+a.Tool+" call with other arguments than these. "+
			"Ask again with that call's arguments, or with the key alone.", nil)
	}
	if errors.Is(err, idemkit.ErrNotFound) || (err == nil && rec.Expired()) {
		return status(CallUnknown, "No "+a.Tool+" call with these arguments is on record for you: you never made it, or its result is no longer kept. "+
			"Nothing is running for it; calling "+a.Tool+" with these arguments runs it.", nil)
	}
	if err != nil {
		return codec.WithMeta(codec.ErrorResult("The record of the "+a.Tool+" call could not be read, because the idempotency store is unavailable. "+
			"Nothing was done. Call "+self+" again in a few seconds."), CallStatusMetaKey, map[string]any{"state": spancontract.RefusalStoreUnavailable, "tool": a.Tool})
	}
	now := rec.Now
	if now.IsZero() {
		now = time.Now()
	}
	switch rec.State {
	case idemstore.StateCompleted:
		switch {
		case rec.Storage == idemstore.StorageDropped || (rec.Body == nil && rec.Size > 0):
			return codec.WithMeta(codec.WithMeta(codec.ErrorResult("The "+a.Tool+" call with these arguments already ran, but its result was too large to keep. "+
				"Do not call it again: the work is done."), spancontract.RefusalMetaKey, map[string]any{"reason": spancontract.RefusalResponseNotKept}),
				CallStatusMetaKey, map[string]any{"state": CallCompleted, "tool": a.Tool, "attempt": rec.Attempt})
		}
		stored, uerr := codec.Unmarshal(rec.Body)
		if uerr != nil {
			return codec.WithMeta(codec.ErrorResult(unreadableText(a.Tool)), CallStatusMetaKey, map[string]any{"state": CallCompleted, "tool": a.Tool, "attempt": rec.Attempt})
		}
		return codec.WithMeta(stored, spancontract.ReplayMetaKey, replayMarker(rec.Attempt, rec.WriteID))
	case idemstore.StateReleased:
		why := "it failed"
		if rec.Cancelled {
			why = "it was cancelled"
		}
		if rec.Error != "" {
			why += " (" + clip.Text(rec.Error, 300) + ")"
		}
		return status(CallReleased, "The last "+a.Tool+" call with these arguments ended without a kept result: "+why+", attempt "+strconv.Itoa(rec.Attempt)+". "+
			"Nothing is running for it; calling "+a.Tool+" with these arguments runs it again.", map[string]any{"attempt": rec.Attempt})
	}
	// In progress.
	started := rec.Started
	ran := max(now.Sub(started), 0)
	left := rec.LeaseUntil.Sub(now)
	extra := map[string]any{"attempt": rec.Attempt}
	if !started.IsZero() {
		extra["started"] = started.UTC().Format(time.RFC3339Nano)
	}
	note := DecodeRunNote(rec.Note).Text()
	if note != "" {
		extra["note"] = note
	}
	if left <= 0 {
		return status(CallAbandoned, "The "+a.Tool+" call with these arguments stopped without an outcome: it has not reported for longer than its lease "+
			"(attempt "+strconv.Itoa(rec.Attempt)+", started "+ago(ran)+"). Whether it did its work is unknown: check its effect before calling "+a.Tool+
			" again, which would run it again.", extra)
	}
	wait := pollHint(ran, left)
	extra["retry_after_ms"] = wait.Milliseconds()
	extra["lease_expires_in_ms"] = left.Round(time.Millisecond).Milliseconds()
	text := "The " + a.Tool + " call with these arguments is still in progress (attempt " + strconv.Itoa(rec.Attempt) + ", started " + ago(ran)
	if note != "" {
		text += "; last progress: " + note
	}
	text += "). It has not failed. Do not call " + a.Tool + " again; call " + self + " again in about " + seconds(wait) +
		" for its result. (If it stops reporting, its claim runs out in " + seconds(left) + " and a new call would run it again.)"
	return status(CallInProgress, text, extra)
}

func nonEmptyJSON(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// pollHint is when to ask again about a call that has run for ran and
// whose lease holds for left: a quarter of its run so far, between 1s and
// 30s, and never past the lease (when the answer may change anyway). It
// promises nothing about when the call ends; nobody knows that.
func pollHint(ran, left time.Duration) time.Duration {
	d := min(max(ran/4, time.Second), 30*time.Second)
	return max(min(d, left), 0).Round(time.Millisecond)
}

func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

func seconds(d time.Duration) string {
	return max(d.Round(time.Second), time.Second).String()
}

// callStatusHint is the sentence an in-progress answer adds when the
// status tool it names is the call status tool: what to give it.
func callStatusHint(self, tool string) string {
	return "Give " + self + " \"tool\": \"" + tool + "\" and this call's \"arguments\" (or its idempotency_key as \"key\")."
}
