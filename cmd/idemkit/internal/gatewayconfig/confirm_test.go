package gatewayconfig

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

func confirmOf(t *testing.T, src string) mcpcall.Confirmation {
	t.Helper()
	f, err := Parse("g.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var c mcpcall.Config
	f.ApplyInstrumentation(&c)
	conf, ok := c.Confirm["issue_refund"]
	if !ok || conf.Question == nil {
		t.Fatalf("no gate on issue_refund: %v", c.Confirm)
	}
	return conf
}

func TestConfirm_RendersTheQuestionFromTheArguments(t *testing.T) {
	conf := confirmOf(t, `
tools:
  issue_refund:
    confirm:
      question: "Refund {amount_cents} cents on \"{order_id}\" for {/customer/name} ({{{missing}}})?"
      above: {field: /amount_cents, value: 10000}
`)
	if conf.Unasked {
		t.Error("unasked by default")
	}
	cases := []struct{ args, want string }{
		{`{"order_id":"ord_1001","amount_cents":25000,"customer":{"name":"Ann"}}`, `Refund 25000 cents on "ord_1001" for Ann ({(none)})?`},
		// Under or at the threshold: no question.
		{`{"order_id":"ord_1001","amount_cents":10000}`, ""},
		// Not a number, or absent: asked (fail closed).
		{`{"order_id":"o","amount_cents":"5"}`, `Refund 5 cents on "o" for (none) ({(none)})?`},
		{`{}`, `Refund (none) cents on "(none)" for (none) ({(none)})?`},
		// Caller bytes: control and invisible formatting characters are
		// replaced, a long value is cut, an object shown as JSON.
		{`{"amount_cents":20000,"order_id":"o\u202eevil\n\u0007x","customer":{"name":{"a":1}}}`, "Refund 20000 cents on \"o\uFFFDevil\uFFFD\uFFFDx\" for {\"a\":1} ({(none)})?"},
		{`{"amount_cents":20000,"order_id":"` + strings.Repeat("é", 100) + `"}`, `Refund 20000 cents on "` + strings.Repeat("é", MaxConfirmValueRunes) + `…" for (none) ({(none)})?`},
	}
	for _, c := range cases {
		got, err := conf.Question(json.RawMessage(c.args))
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %q, %v\nwant %q", c.args, got, err, c.want)
		}
	}
	if _, err := conf.Question(json.RawMessage(`{"a":`)); err == nil {
		t.Error("unreadable arguments: no error")
	}
}

func TestConfirm_Unasked(t *testing.T) {
	conf := confirmOf(t, "tools:\n  issue_refund:\n    confirm:\n      question: Refund?\n      unasked: true\n")
	if !conf.Unasked {
		t.Error("unasked: true not applied")
	}
	if q, err := conf.Question(nil); q != "Refund?" || err != nil {
		t.Errorf("%q, %v", q, err)
	}
}

func TestConfirm_Errors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"tools:\n  a:\n    confirm: yes\n", "g.yaml:3: tools.a.confirm: must be a mapping of question, above, unasked"},
		{"tools:\n  a:\n    confirm:\n      unasked: true\n", "g.yaml:4: tools.a.confirm: needs a question"},
		{"tools:\n  a:\n    confirm:\n      question: \"Refund {amount?\"\n", "g.yaml:4: tools.a.confirm.question: has a { at byte 7 that is never closed"},
		{"tools:\n  a:\n    confirm:\n      question: \"Refund }\"\n", "g.yaml:4: tools.a.confirm.question: has a } at byte 7 that closes nothing"},
		{"tools:\n  a:\n    confirm:\n      question: \"Refund {}\"\n", "g.yaml:4: tools.a.confirm.question: placeholder {}: names no argument"},
		{"tools:\n  a:\n    confirm:\n      question: \"Refund {/a~2}\"\n", "g.yaml:4: tools.a.confirm.question: placeholder {/a~2}: \"/a~2\" is not a JSON Pointer"},
		{"tools:\n  a:\n    confirm:\n      question: \"Refund\\u202e?\"\n", "g.yaml:4: tools.a.confirm.question: has a control or invisible formatting character"},
		{"tools:\n  a:\n    confirm:\n      question: \"\"\n", "g.yaml:4: tools.a.confirm.question: must not be empty"},
		{"tools:\n  a:\n    confirm:\n      question: " + strings.Repeat("x", MaxQuestionBytes+1) + "\n", "over the 1000-byte limit"},
		{"tools:\n  a:\n    confirm:\n      question: q\n      above: {field: amount}\n", "g.yaml:5: tools.a.confirm.above: needs both field"},
		{"tools:\n  a:\n    confirm:\n      question: q\n      above: {field: amount, value: lots}\n", "g.yaml:5: tools.a.confirm.above.value: must be a number"},
		{"tools:\n  a:\n    confirm:\n      question: q\n      above: {field: amount, value: 1, over: 2}\n", "tools.a.confirm.above.over: unknown setting"},
		{"tools:\n  a:\n    confirm:\n      question: q\n      asked: true\n", "g.yaml:5: tools.a.confirm.asked: unknown setting"},
		{"tools:\n  a:\n    protect: false\n    confirm:\n      question: q\n", "tools.a.confirm: has no effect: protect is false"},
	}
	for _, c := range cases {
		_, err := Parse("g.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %q", c.src, err, c.want)
		}
	}
}
