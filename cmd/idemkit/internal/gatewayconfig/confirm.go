package gatewayconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// A tool's human gate (confirm): before the gateway forwards a protected
// call of the tool, it asks the client's user through MCP elicitation:
//
//	tools:
//	  issue_refund:
//	    confirm:
//	      question: "Refund {amount_cents} cents on order {order_id}?"
//	      above: {field: amount_cents, value: 10000}  # ask only over 100.00
//	      unasked: false                              # the default
//
// The question is a template: {name} is the top-level argument name,
// {/a/b} the argument at a JSON Pointer (RFC 6901), {{ and }} are literal
// braces. The values are the caller's bytes: a string is shown as its
// text, any other value as compact JSON, each cut to MaxConfirmValueRunes
// characters (…), with control and invisible formatting characters
// (bidirectional overrides, zero-width spaces) replaced by U+FFFD, so a
// caller cannot make the question read as something else on the user's
// screen; an argument that is absent is shown as (none). Quote the
// placeholders in the template when the user should see where a value
// begins and ends.
//
// above asks only when the argument at field is a number over value; an
// absent argument, or one that is not a number, is asked about (fail
// closed). unasked: true runs the tool without a question for a client
// that did not declare the elicitation capability; by default such a call
// is refused (confirmation_unavailable) and nothing runs.

// Limits of a confirm setting.
const (
	// MaxConfirmValueRunes is the most characters of one argument a
	// question shows.
	MaxConfirmValueRunes = 64
	// MaxQuestionBytes bounds a question's template.
	MaxQuestionBytes = 1000
)

var (
	confirmFields = []string{"question", "above", "unasked"}
	aboveFields   = []string{"field", "value"}
)

// Confirm is a tool's confirm setting.
type Confirm struct {
	// Question is the template, as written.
	Question string
	// Above, when set, asks only when the argument at AbovePointer is a
	// number over AboveValue.
	Above        bool
	AbovePointer string // a JSON Pointer
	AboveValue   float64
	// Unasked runs the tool unasked for a client that cannot be asked.
	Unasked bool

	tmpl []tmplPart
}

// tmplPart is a literal (pointer == "" && !field) or a placeholder.
type tmplPart struct {
	lit     string
	pointer []string // the placeholder's reference tokens, when field
	field   bool
}

func (p *parser) confirm(v *yaml.Node, where string) *Confirm {
	c := &Confirm{}
	p.fields(v, where, confirmFields, func(key string, k, v *yaml.Node) {
		at := join(where, key)
		p.f.lines[at] = v.Line
		switch key {
		case "question":
			c.Question = p.str(v, at)
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
				return
			}
			tmpl, err := parseQuestion(c.Question)
			if err != nil {
				p.fail(v, at, "%v", err)
				return
			}
			c.tmpl = tmpl
		case "above":
			p.f.lines[at] = v.Line
			fieldSet, valueSet := false, false
			p.fields(v, at, aboveFields, func(key string, k, v *yaml.Node) {
				in := join(at, key)
				switch key {
				case "field":
					s := p.str(v, in)
					ptr, err := fieldPointer(s)
					if err != nil && s != "" {
						p.fail(v, in, "%v", err)
					} else if s == "" && v.Tag == "!!str" {
						p.fail(v, in, "must name an argument (amount_cents) or a JSON Pointer (/payment/amount)")
					}
					c.AbovePointer, fieldSet = ptr, s != ""
				case "value":
					f, err := strconv.ParseFloat(v.Value, 64)
					if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") || err != nil {
						p.fail(v, in, "must be a number, such as 10000")
						return
					}
					c.AboveValue, valueSet = f, true
				}
			})
			if v.Kind == yaml.MappingNode && (!fieldSet || !valueSet) {
				p.fail(v, at, "needs both field (the argument compared) and value (the number over which the question is asked)")
			}
			c.Above = fieldSet && valueSet
		case "unasked":
			c.Unasked = p.boolean(v, at)
		}
	})
	if v.Kind == yaml.MappingNode && !p.f.Sets(join(where, "question")) {
		p.fail(v, where, "needs a question, such as \"Refund {amount_cents} cents on {order_id}?\"")
	}
	return c
}

// parseQuestion parses a question template.
func parseQuestion(q string) ([]tmplPart, error) {
	switch {
	case strings.TrimSpace(q) == "":
		return nil, errors.New("must not be empty")
	case len(q) > MaxQuestionBytes:
		return nil, fmt.Errorf("is %d bytes, over the %d-byte limit", len(q), MaxQuestionBytes)
	case !utf8.ValidString(q):
		return nil, errors.New("is not valid UTF-8")
	case strings.IndexFunc(q, unsafeRune) >= 0:
		return nil, errors.New("has a control or invisible formatting character")
	}
	var parts []tmplPart
	var lit strings.Builder
	for i := 0; i < len(q); i++ {
		switch ch := q[i]; {
		case ch == '{' && i+1 < len(q) && q[i+1] == '{':
			lit.WriteByte('{')
			i++
		case ch == '}' && i+1 < len(q) && q[i+1] == '}':
			lit.WriteByte('}')
			i++
		case ch == '}':
			return nil, fmt.Errorf("has a } at byte %d that closes nothing (write }} for a literal brace)", i)
		case ch == '{':
			end := strings.IndexByte(q[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("has a { at byte %d that is never closed (write {{ for a literal brace)", i)
			}
			name := q[i+1 : i+end]
			ptr, err := fieldPointer(name)
			if err != nil {
				return nil, fmt.Errorf("placeholder {%s}: %v", name, err)
			}
			if lit.Len() > 0 {
				parts = append(parts, tmplPart{lit: lit.String()})
				lit.Reset()
			}
			tokens, _ := pointerTokens(ptr)
			parts = append(parts, tmplPart{pointer: tokens, field: true})
			i += end
		default:
			lit.WriteByte(ch)
		}
	}
	if lit.Len() > 0 {
		parts = append(parts, tmplPart{lit: lit.String()})
	}
	return parts, nil
}

// fieldPointer returns the JSON Pointer of a field reference: a top-level
// argument name, or a JSON Pointer (starting with /).
func fieldPointer(ref string) (string, error) {
	switch {
	case ref == "":
		return "", errors.New("names no argument: write {amount_cents} or {/payment/amount}")
	case strings.HasPrefix(ref, "/"):
		if _, err := pointerTokens(ref); err != nil {
			return "", err
		}
		return ref, nil
	case strings.ContainsAny(ref, "{}"):
		return "", fmt.Errorf("%q is not an argument name", ref)
	}
	return "/" + strings.ReplaceAll(strings.ReplaceAll(ref, "~", "~0"), "/", "~1"), nil
}

// pointerTokens splits a JSON Pointer into its unescaped reference tokens.
func pointerTokens(ptr string) ([]string, error) {
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("%q is not a JSON Pointer (it starts with /)", ptr)
	}
	var out []string
	for _, tok := range strings.Split(ptr[1:], "/") {
		for j := 0; j < len(tok); j++ {
			if tok[j] == '~' && (j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1')) {
				return nil, fmt.Errorf("%q is not a JSON Pointer: ~ must be followed by 0 or 1", ptr)
			}
		}
		out = append(out, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
	}
	return out, nil
}

// lookup returns the value at tokens in v (decoded with UseNumber).
func lookup(v any, tokens []string) (any, bool) {
	for _, tok := range tokens {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// unsafeRune reports a character a question must not carry: a control
// character, or an invisible formatting one (Unicode category Cf: the
// bidirectional overrides, zero-width spaces and joiners).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// renderValue shows one argument in a question (see the package's confirm
// documentation).
func renderValue(v any, ok bool) string {
	if !ok {
		return "(none)"
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return "(unreadable)"
		}
		s = string(b)
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unsafeRune(r) {
			return '\uFFFD'
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > MaxConfirmValueRunes {
		n := 0
		for i := range s {
			if n == MaxConfirmValueRunes {
				s = s[:i] + "…"
				break
			}
			n++
		}
	}
	return s
}

// Render returns the question to ask before a call with args (raw JSON
// arguments), or "" when the call needs none (under the above
// threshold).
func (c *Confirm) Render(args json.RawMessage) (string, error) {
	var v any = map[string]any{}
	if t := bytes.TrimSpace(args); len(t) > 0 && string(t) != "null" {
		d := json.NewDecoder(bytes.NewReader(t))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return "", fmt.Errorf("the arguments are not JSON: %w", err)
		}
	}
	if c.Above {
		tokens, _ := pointerTokens(c.AbovePointer)
		if x, ok := lookup(v, tokens); ok {
			if n, isNum := x.(json.Number); isNum {
				if f, err := n.Float64(); err == nil && f <= c.AboveValue {
					return "", nil
				}
			}
		}
	}
	var b strings.Builder
	for _, part := range c.tmpl {
		if !part.field {
			b.WriteString(part.lit)
			continue
		}
		b.WriteString(renderValue(lookup(v, part.pointer)))
	}
	return b.String(), nil
}

// confirmation is c as the machinery's human gate.
func (c *Confirm) confirmation() mcpcall.Confirmation {
	return mcpcall.Confirmation{Question: c.Render, Unasked: c.Unasked}
}
