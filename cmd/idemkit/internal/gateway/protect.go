package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
)

// Protector is the CallHandler that runs every tools/call through idemkit's
// instrumentation, the machinery the Go middleware runs: one span and the
// metrics per call, and, for protected tools, claim-and-replay with the
// Guard (the replay marker, the in-progress and mismatch answers, the
// failure policy). It works on the raw JSON of results, so a replay is the
// upstream's own answer byte for byte plus the replay marker.
//
// Callers: over HTTP the caller is the subject the gateway took from the
// subject header; a protected call without one is refused, never run
// unprotected. On stdio the process serves one client, which needs no
// subject. Build it with NewProtector; it is safe for concurrent use.
type Protector struct {
	in  *instrument.Instrumenter
	log *slog.Logger

	warned sync.Map // tool -> struct{}: the unscoped refusal was logged
}

type subjectKey struct{}

func subjectFromContext(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// NewProtector returns a Protector that claims protected calls with guard
// and traces every call, configured by opts (providers, --protect and
// --bypass). log (may be nil) receives one line per tool the first time a
// call of it is refused for want of a subject.
func NewProtector(guard *idemkit.Guard, log *slog.Logger, opts ...instrument.Option) *Protector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = append(opts[:len(opts):len(opts)], instrument.WithSubject(subjectFromContext))
	return &Protector{in: instrument.New(guard, opts...), log: log}
}

// Protects implements CallHandler.
func (p *Protector) Protects(tool string, a Annotations) bool {
	return p.in.Protects(tool, a.ReadOnly, a.Idempotent)
}

// HandleCall implements CallHandler.
func (p *Protector) HandleCall(ctx context.Context, call *ToolCall, forward Forward) (json.RawMessage, error) {
	if !call.Local && call.Subject == "" && p.Protects(call.Tool, call.Annotations) {
		if _, seen := p.warned.LoadOrStore(call.Tool, struct{}{}); !seen {
			p.log.Warn("refusing calls of a protected tool without a subject: send the subject header (by default Authorization: Bearer …) or --bypass the tool",
				"tool", call.Tool)
		}
		return rawCodec{}.ErrorResult(unscopedText(call.Tool)), nil
	}
	var meta map[string]any
	if len(call.Meta) > 0 {
		_ = json.Unmarshal(call.Meta, &meta)
	}
	tc := &instrument.ToolCall{
		Tool:            call.Tool,
		Arguments:       call.Arguments,
		Meta:            meta,
		SessionID:       call.SessionID,
		RequestID:       call.RequestID,
		ProtocolVersion: call.ProtocolVersion,
		Local:           call.Local,
		ReadOnlyHint:    call.Annotations.ReadOnly,
		IdempotentHint:  call.Annotations.Idempotent,
	}
	ctx = context.WithValue(ctx, subjectKey{}, call.Subject)
	return instrument.Handle(ctx, p.in, tc, rawCodec{}, func(ctx context.Context) (json.RawMessage, error) {
		return forward(ctx)
	})
}

func unscopedText(tool string) string {
	return "The " + tool + " call was refused and nothing was done: the idemkit gateway could not tell who is calling " +
		"(the request has no subject header, by default Authorization), so it cannot make retries of this call safe. " +
		"Send the call with the caller's credentials."
}

// rawCodec is the instrument.Codec of raw CallToolResult JSON.
type rawCodec struct{}

var _ instrument.Codec[json.RawMessage] = rawCodec{}

func (rawCodec) Marshal(r json.RawMessage) ([]byte, error) {
	if len(r) == 0 {
		return nil, errNoResult
	}
	return r, nil
}

func (rawCodec) Unmarshal(b []byte) (json.RawMessage, error) {
	if !json.Valid(b) {
		return nil, errNoResult
	}
	return json.RawMessage(b), nil
}

// resultFlags are the CallToolResult fields the codec reads.
type resultFlags struct {
	IsError    bool   `json:"isError"`
	ResultType string `json:"resultType"`
}

func flags(r json.RawMessage) resultFlags {
	var f resultFlags
	if len(r) > 0 {
		_ = json.Unmarshal(r, &f)
	}
	return f
}

func (rawCodec) IsError(r json.RawMessage) bool { return flags(r).IsError }

// NeedsInput reports a multi-round-trip result that asks for input
// (resultType "input_required"): it is not stored.
func (rawCodec) NeedsInput(r json.RawMessage) bool { return flags(r).ResultType == "input_required" }

func (rawCodec) ErrorResult(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": true,
	})
	return b
}

// WithMeta returns a copy of r with _meta[key] = value.
func (rawCodec) WithMeta(r json.RawMessage, key string, value any) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(r, &obj) != nil || obj == nil {
		obj = map[string]json.RawMessage{}
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(obj["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	v, err := json.Marshal(value)
	if err != nil {
		return r
	}
	meta[key] = v
	obj["_meta"], _ = json.Marshal(meta)
	b, err := json.Marshal(obj)
	if err != nil {
		return r
	}
	return b
}

var errNoResult = &RPCError{Code: codeInternalError, Message: "the upstream answered tools/call without a result"}
