package instrument

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"

	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// FormatRequestID formats a JSON-RPC request ID as the jsonrpc.request.id
// attribute: a string as it is, a number in full decimal notation (never in
// exponent form: 1e+21 is written 1000000000000000000000). It reports false
// for nil and for types it does not know, so that a caller leaves the
// attribute off rather than invent a value.
func FormatRequestID(id any) (string, bool) {
	switch v := id.(type) {
	case string:
		return v, true
	case float64:
		return formatFloat(v)
	case float32:
		return formatFloat(float64(v))
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case json.Number:
		if f, err := v.Float64(); err == nil && !isIntegerLiteral(string(v)) {
			return formatFloat(f)
		}
		return string(v), v != ""
	}
	return "", false
}

func formatFloat(f float64) (string, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", false
	}
	return strconv.FormatFloat(f, 'f', -1, 64), true
}

func isIntegerLiteral(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return true
}

// metaCarrier adapts params._meta to a propagation.TextMapCarrier.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	s, _ := m[key].(string)
	return s
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// extract returns ctx with the trace context found in meta as the parent,
// and the ambient span context to link to when meta replaced it.
func (in *Instrumenter) extract(ctx context.Context, meta map[string]any) (context.Context, trace.SpanContext) {
	if len(meta) == 0 {
		return ctx, trace.SpanContext{}
	}
	ambient := trace.SpanContextFromContext(ctx)
	out := in.cfg.prop.Extract(ctx, metaCarrier(meta))
	remote := trace.SpanContextFromContext(out)
	if ambient.IsValid() && remote.IsValid() && !remote.Equal(ambient) {
		return out, ambient
	}
	return out, trace.SpanContext{}
}

// errorType returns the error.type of err: the value of an ErrorType method,
// else the type name of the cause under fmt.Errorf wrappers (for a wrapper
// of several errors, the last one: idemkit wraps its sentinel first and the
// driver's error last), as the semantic conventions derive it.
func errorType(err error) string {
	if et, ok := err.(interface{ ErrorType() string }); ok {
		if s := et.ErrorType(); s != "" {
			return s
		}
	}
	for {
		t := reflect.TypeOf(err)
		if t == nil || t.Kind() != reflect.Pointer || t.Elem().PkgPath() != "fmt" {
			break
		}
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			break
		}
		err = next
	}
	return semconv.ErrorType(err).Value.AsString()
}

// capture cuts s to at most n bytes without splitting a UTF-8 sequence.
func capture(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut])
}

var errNeedsInput = errors.New("instrument: the result asks for more input")
