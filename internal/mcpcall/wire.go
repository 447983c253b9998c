package mcpcall

import (
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// FormatRequestID formats a JSON-RPC request ID as jsonrpc.request.id: a
// string as it is, a number in full decimal notation (never in exponent
// form: 1e+21 is written 1000000000000000000000). It reports false for nil
// and for types it does not know, so that a caller leaves the attribute
// off rather than invent a value.
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
	case json.RawMessage:
		return FormatRawRequestID(v)
	}
	return "", false
}

// FormatRawRequestID formats the raw JSON of a request ID: a JSON string
// or number; false for null, absent or anything else.
func FormatRawRequestID(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", false
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case 'n', 't', 'f', '{', '[':
		return "", false
	}
	return FormatRequestID(json.Number(raw))
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

// capture cuts b to at most n bytes without splitting a UTF-8 sequence.
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

func metricAttrs(kvs []attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributes(kvs...)}
}
