package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/maphash"
	"math"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/spanview"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
	"github.com/idemkit-mcp/idemkit/spancontract/canonjson"
)

// serviceNameKey is the resource attribute service.name (not in spancontract:
// it is OpenTelemetry's, not the contract's).
const serviceNameKey = string(semconv.ServiceNameKey)

// parseOutcome parses idemkit.outcome.
func parseOutcome(s string) state.Outcome {
	switch s {
	case "":
		return state.OutcomeNone
	case sc.OutcomeExecuted:
		return state.OutcomeExecuted
	case sc.OutcomeReplayed:
		return state.OutcomeReplayed
	case sc.OutcomeInProgress:
		return state.OutcomeInProgress
	case sc.OutcomeTakeover:
		return state.OutcomeTakeover
	default:
		return state.OutcomeOther
	}
}

// ignoreReason says why a tool span is passed through untracked; the values
// are the telemetry attribute's enum.
type ignoreReason string

const (
	reasonNone            ignoreReason = ""
	reasonNoKey           ignoreReason = "no_key"
	reasonBadTimestamp    ignoreReason = "bad_timestamp"
	reasonExcludedOutcome ignoreReason = "excluded_outcome"
	reasonResent          ignoreReason = "resent"
	reasonReadOnly        ignoreReason = "read_only"
)

// Domain tags keep the three key derivations and the context kinds apart.
const (
	domainKeyHash   = 'k' // an idemkit.key.hash that is not 32 hex characters
	domainSubject   = 's' // subject hash + tool + args hash
	domainArguments = 'a' // this processor's own hash of the arguments

	ctxTrace        uint64 = 0x9e3779b97f4a7c15
	ctxConversation uint64 = 0xc2b2ae3d27d4eb4f
	ctxSession      uint64 = 0x165667b19e3779f9
	ctxUser         uint64 = 0x27d4eb2f165667c5
)

// toolAttrs are the attributes of a tool span that the processor reads, in
// one pass over the span's attributes.
type toolAttrs struct {
	keyHash, argsHash, subjectHash, keySource, tool string
	args                                            pcommon.Value
	hasArgs                                         bool
	session, requestID, writeID, conv               string
	user, endUser                                   string
	outcome, bypassReason                           string
	attempt                                         int64
	annotated                                       bool // carries idemkit.duplicate* attributes already
	inputRequested, inputContinuation               bool
	refused                                         bool // carries idemkit.refusal.reason
}

// readToolAttrs reads the attributes of a tool span into a, in one pass.
// Values of an unexpected type are converted when that is unambiguous (an
// int request ID) and ignored otherwise; nothing here can panic. It
// dispatches on the key's length first: every tool span carries a dozen
// attributes, and most lengths name at most one key of interest, so a key
// costs one comparison (FuzzReadToolAttrs_MatchesPlainSwitch checks it
// against a plain switch).
func readToolAttrs(attrs pcommon.Map, a *toolAttrs) {
	for k, v := range attrs.All() {
		var dst *string
		switch len(k) {
		case len(sc.UserID):
			if k == sc.UserID {
				dst = &a.user
			}
		case len(sc.EndUserID):
			if k == sc.EndUserID {
				dst = &a.endUser
			}
		case len(sc.MCPSessionID):
			if k == sc.MCPSessionID {
				dst = &a.session
			}
		case len(sc.Outcome): // and sc.Attempt
			switch k {
			case sc.Outcome:
				if v.Type() == pcommon.ValueTypeStr {
					a.outcome = v.Str()
				}
			case sc.Attempt:
				switch v.Type() {
				case pcommon.ValueTypeInt:
					a.attempt = v.Int()
				case pcommon.ValueTypeDouble:
					if f := v.Double(); f >= 0 && f < math.MaxInt32 {
						a.attempt = int64(f)
					}
				}
			}
		case len(sc.KeyHash): // and sc.GenAIToolName, sc.WriteID
			switch k {
			case sc.KeyHash:
				dst = &a.keyHash
			case sc.GenAIToolName:
				dst = &a.tool
			case sc.WriteID:
				dst = &a.writeID
			}
		case len(sc.ArgsHash):
			if k == sc.ArgsHash {
				dst = &a.argsHash
			}
		case len(sc.KeySource): // and sc.JSONRPCRequestID
			switch k {
			case sc.KeySource:
				dst = &a.keySource
			case sc.JSONRPCRequestID:
				dst = &a.requestID
			}
		case len(sc.SubjectHash):
			if k == sc.SubjectHash {
				dst = &a.subjectHash
			}
		case len(sc.BypassReason):
			if k == sc.BypassReason {
				dst = &a.bypassReason
			}
		case len(sc.GenAIConversationID): // and sc.RefusalReason
			switch k {
			case sc.GenAIConversationID:
				dst = &a.conv
			case sc.RefusalReason:
				a.refused = scalar(v) != ""
			}
		case len(sc.InputRequested):
			if k == sc.InputRequested {
				a.inputRequested = truthy(v)
			}
		case len(sc.InputContinuation): // and sc.GenAIToolCallArguments
			switch k {
			case sc.InputContinuation:
				a.inputContinuation = truthy(v)
			case sc.GenAIToolCallArguments:
				a.args, a.hasArgs = v, v.Type() != pcommon.ValueTypeEmpty
			}
		}
		if dst != nil {
			*dst = scalar(v)
		} else if !a.annotated && len(k) >= len(sc.Duplicate) && k[len(sc.Duplicate)-1] == sc.Duplicate[len(sc.Duplicate)-1] &&
			strings.HasPrefix(k, sc.Duplicate) {
			// None of the keys above starts with the prefix. The test of
			// the prefix's last byte spares most keys the comparison call.
			a.annotated = true
		}
	}
}

// truthy reports whether a flag attribute is set: the bool true, or the
// string "true" (an exporter that stringified it).
func truthy(v pcommon.Value) bool {
	switch v.Type() {
	case pcommon.ValueTypeBool:
		return v.Bool()
	case pcommon.ValueTypeStr:
		return v.Str() == "true"
	}
	return false
}

// scalar is spanview.Scalar with the common case, a non-empty string,
// read with one type check.
func scalar(v pcommon.Value) string {
	if s := v.Str(); s != "" {
		return s
	}
	return spanview.Scalar(v)
}

// keyer derives group keys and context hashes. It is not safe for
// concurrent use: the processor calls it under its mutex.
type keyer struct {
	seed    maphash.Seed
	buf     []byte
	maxArgs int
}

// groupKey derives the duplicate key of a tool span: idemkit's key hash;
// else subject/tool/argument hash; else a hash of the canonical
// gen_ai.tool.call.arguments. ok is false when none is there. weak is true
// when the key does not identify the caller: the arguments hash of another
// instrumentation, or an idemkit key without a subject hash (a call that
// could not be scoped to a caller) that is not the caller's explicit key.
func (k *keyer) groupKey(key *state.Key, a *toolAttrs, res pcommon.Resource, s ptrace.Span) (ok, weak bool) {
	if a.keyHash == "" || a.argsHash == "" || a.subjectHash == "" {
		// groupbyattrs (used in front of a load_balancing exporter) moves the
		// routing attribute from the span to its resource.
		ra := res.Attributes()
		if a.keyHash == "" {
			if v, ok := ra.Get(sc.KeyHash); ok {
				a.keyHash = scalar(v)
			}
		}
		if a.keyHash == "" && a.argsHash == "" {
			if v, ok := ra.Get(sc.ArgsHash); ok {
				a.argsHash = scalar(v)
			}
		}
		if a.keyHash == "" && a.subjectHash == "" {
			if v, ok := ra.Get(sc.SubjectHash); ok {
				a.subjectHash = scalar(v)
			}
		}
	}
	switch {
	case a.keyHash != "":
		if !decodeKeyHash(key, a.keyHash) {
			*key = k.sum(domainKeyHash, a.keyHash)
		}
		return true, a.subjectHash == "" && a.keySource != sc.KeySourceExplicit
	case a.argsHash != "":
		*key = k.sum(domainSubject, a.subjectHash, a.tool, a.argsHash)
		return true, a.subjectHash == ""
	case a.hasArgs:
		side := "client"
		if s.Kind() == ptrace.SpanKindServer {
			side = "server"
		}
		svc := ""
		if v, ok := res.Attributes().Get(serviceNameKey); ok {
			svc = scalar(v)
		}
		*key = k.sum(domainArguments, side, svc, a.tool, k.canonicalArgs(a.args))
		return true, true
	}
	return false, false
}

// hexVal maps an ASCII hex digit (either case, as encoding/hex accepts) to
// its value, and every other byte to 0xff.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
		t[c-'a'+'A'] = c - 'a' + 10
	}
	return t
}()

// decodeKeyHash decodes a key hash of exactly 32 hex digits into key, as
// hex.Decode would, without allocating; false when s is anything else.
func decodeKeyHash(key *state.Key, s string) bool {
	if len(s) != 2*len(key) {
		return false
	}
	var bad byte
	for i := range key {
		hi, lo := hexVal[s[2*i]], hexVal[s[2*i+1]]
		bad |= hi | lo
		key[i] = hi<<4 | lo
	}
	return bad&0xf0 == 0
}

// sum returns the first 16 bytes of the SHA-256 of the domain tag and the
// NUL-separated parts.
func (k *keyer) sum(domain byte, parts ...string) state.Key {
	b := append(k.buf[:0], domain)
	for _, p := range parts {
		b = append(b, 0)
		b = append(b, p...)
	}
	k.buf = b
	sum := sha256.Sum256(b)
	var key state.Key
	copy(key[:], sum[:])
	return key
}

// canonicalArgs returns the canonical form of the arguments when they are
// JSON no larger than maxArgs, prefixed "c": the form idemkit's keys hash
// (package canonjson: RFC 8785 with numbers by exact decimal value, so
// 9007199254740993 and 9007199254740992 stay apart while 1, 1.0 and 1e0
// group). Otherwise it returns their raw text prefixed "r", so identical
// retries still group together.
//
// Arguments with two member names equal under case folding
// ({"a":1,"A":2}) are not canonicalised: a Go server reads them as one
// member, the last, so two calls that differ only in the order of those
// members are different calls that one canonical form would merge. They
// are compared by their text as recorded (a map attribute in its own
// order), so that only the same bytes group: those are the same call to
// any reader.
func (k *keyer) canonicalArgs(v pcommon.Value) string {
	var raw []byte
	switch v.Type() {
	case pcommon.ValueTypeStr:
		raw = []byte(v.Str())
	case pcommon.ValueTypeMap, pcommon.ValueTypeSlice:
		b, err := json.Marshal(v.AsRaw())
		if err != nil {
			return "r" + v.AsString()
		}
		raw = b
	case pcommon.ValueTypeBytes:
		return "r" + string(v.Bytes().AsRaw())
	default:
		return "r" + v.AsString()
	}
	if len(raw) > k.maxArgs {
		return "r" + string(raw)
	}
	out, err := canonjson.Transform(raw)
	if err != nil {
		if v.Type() != pcommon.ValueTypeStr && errors.Is(err, canonjson.ErrCaseVariantNames) {
			// json.Marshal sorted the map: write it in its own order.
			return "r" + string(appendOrdered(nil, v))
		}
		return "r" + string(raw)
	}
	return "c" + string(out)
}

// appendOrdered appends a text form of v that keeps the order of its maps'
// members: Go-quoted strings and keys, numbers in Go's shortest form. Two
// values with the same form are equal member for member, in order.
func appendOrdered(b []byte, v pcommon.Value) []byte {
	switch v.Type() {
	case pcommon.ValueTypeMap:
		b = append(b, '{')
		first := true
		for key, val := range v.Map().All() {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = strconv.AppendQuote(b, key)
			b = append(b, ':')
			b = appendOrdered(b, val)
		}
		return append(b, '}')
	case pcommon.ValueTypeSlice:
		b = append(b, '[')
		s := v.Slice()
		for i := range s.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendOrdered(b, s.At(i))
		}
		return append(b, ']')
	case pcommon.ValueTypeStr:
		return strconv.AppendQuote(b, v.Str())
	case pcommon.ValueTypeInt:
		return strconv.AppendInt(b, v.Int(), 10)
	case pcommon.ValueTypeDouble:
		return strconv.AppendFloat(b, v.Double(), 'g', -1, 64)
	case pcommon.ValueTypeBool:
		return strconv.AppendBool(b, v.Bool())
	case pcommon.ValueTypeBytes:
		b = append(b, 'b')
		return strconv.AppendQuote(b, string(v.Bytes().AsRaw()))
	}
	return append(b, "null"...)
}

// str hashes a non-empty string into a context key of the given kind; 0 for "".
func (k *keyer) str(kind uint64, s string) uint64 {
	if s == "" {
		return 0
	}
	return nonZero(maphash.String(k.seed, s) ^ kind)
}

// str32 hashes a non-empty string into a non-zero 32-bit ID; 0 for "".
func (k *keyer) str32(s string) uint32 {
	if s == "" {
		return 0
	}
	h := maphash.String(k.seed, s)
	if v := uint32(h) ^ uint32(h>>32); v != 0 {
		return v
	}
	return 1
}

// trace returns the context key of a trace ID; 0 for the empty trace ID.
func traceKey(id pcommon.TraceID) uint64 {
	if id.IsEmpty() {
		return 0
	}
	return nonZero(binary.LittleEndian.Uint64(id[:8]) ^ binary.LittleEndian.Uint64(id[8:]) ^ ctxTrace)
}

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// startNanos returns the start timestamp of s in nanoseconds; ok is false for
// a zero timestamp or one that does not fit an int64 (year 2262 and later).
func startNanos(ts pcommon.Timestamp) (int64, bool) {
	if ts == 0 || uint64(ts) > math.MaxInt64 {
		return 0, false
	}
	return int64(ts), true
}
