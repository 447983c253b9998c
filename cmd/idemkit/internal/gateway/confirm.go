package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// The gateway's own human gate (mcpcall.Config.Confirm, from a tool's
// confirm setting in the configuration file): before a protected call is
// forwarded, the gateway asks the client's user with an elicitation/create
// request of its own, on the stream of the call (over Streamable HTTP, the
// POST's answer becomes an SSE stream that carries the question; the
// client answers on a new POST), inside the call's claim and with its lease
// kept (see internal/mcpcall/gate.go). The answer is the gateway's: it is
// not forwarded to the upstream, which never sees the question.

// confirmIDPrefix starts the request IDs of the gateway's own questions: a
// string, so they never meet the integer IDs most servers use, and random
// after it, so an upstream cannot aim its own requests' IDs at them.
const confirmIDPrefix = "idemkit-confirm-"

// confirmations are a session's questions waiting for the client's answer.
type confirmations struct {
	mu      sync.Mutex
	waiting map[string]chan *Message // by request ID (idKey)
}

func (c *confirmations) add(id string) chan *Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting == nil {
		c.waiting = map[string]chan *Message{}
	}
	ch := make(chan *Message, 1)
	c.waiting[id] = ch
	return ch
}

func (c *confirmations) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, id)
}

// deliver hands a client's response to the question it answers, and
// reports whether it answered one (it is then not forwarded upstream).
func (c *confirmations) deliver(m *Message) bool {
	c.mu.Lock()
	ch, ok := c.waiting[idKey(m.ID)]
	delete(c.waiting, idKey(m.ID))
	c.mu.Unlock()
	if ok {
		ch <- m
	}
	return ok
}

// clientCanElicit reports whether an initialize request's capabilities
// declare form elicitation: "elicitation": {} (2025-06-18, where form is
// the only mode) or one that lists form (2025-11-25).
func clientCanElicit(params json.RawMessage) bool {
	var p struct {
		Capabilities struct {
			Elicitation *struct {
				Form json.RawMessage `json:"form"`
				URL  json.RawMessage `json:"url"`
			} `json:"elicitation"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(params, &p) != nil || p.Capabilities.Elicitation == nil {
		return false
	}
	e := p.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil
}

// noServerRequests is the protocol version without server-to-client
// requests (multi round-trip requests replaced them, SEP-2322): a client
// of it cannot be asked.
const noServerRequests = "2026-07-28"

// elicitor asks the user of the client of one tools/call: the
// mcpcall.Elicitor of the gateway's human gate.
type elicitor struct {
	s   *session
	out sink // the call's stream to the client
}

// CanElicit implements mcpcall.Elicitor.
func (e *elicitor) CanElicit() bool {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	return e.out != nil && e.s.canElicit && e.s.protocol != noServerRequests
}

// Confirm implements mcpcall.Elicitor: an elicitation/create with an empty
// form, on the call's stream, and the client's answer.
func (e *elicitor) Confirm(ctx context.Context, message string) (string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id, _ := json.Marshal(confirmIDPrefix + hex.EncodeToString(b[:]))
	params, err := json.Marshal(map[string]any{
		"message":         message,
		"requestedSchema": map[string]any{"type": "object", "properties": map[string]any{}},
	})
	if err != nil {
		return "", err
	}
	ch := e.s.confirms.add(idKey(id))
	defer e.s.confirms.remove(idKey(id))
	if err := e.out.send(&Message{JSONRPC: "2.0", ID: id, Method: "elicitation/create", Params: params}); err != nil {
		return "", fmt.Errorf("the question could not be sent: %w", err)
	}
	var resp *Message
	wait := time.NewTimer(e.s.g.askFor)
	defer wait.Stop()
	select {
	case resp = <-ch:
	case <-wait.C:
		cancel, _ := json.Marshal(map[string]any{"requestId": id, "reason": "no answer in time"})
		_ = e.out.send(&Message{JSONRPC: "2.0", Method: "notifications/cancelled", Params: cancel})
		return "", fmt.Errorf("no answer within %s, the gateway's --confirm-timeout", e.s.g.askFor)
	case <-ctx.Done():
		// Tell the client to stop asking, when it is still there.
		cancel, _ := json.Marshal(map[string]any{"requestId": id, "reason": "the call ended"})
		_ = e.out.send(&Message{JSONRPC: "2.0", Method: "notifications/cancelled", Params: cancel})
		return "", context.Cause(ctx)
	case <-e.s.conn.Done():
		return "", errors.New("the session ended")
	}
	if resp.Error != nil {
		return "", fmt.Errorf("the client answered with an error: %s", clipText(resp.Error.Message, 200))
	}
	var r struct {
		Action string `json:"action"`
	}
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		return "", errors.New("the client's answer is not an elicitation result")
	}
	switch r.Action {
	case "accept", "decline", "cancel":
		return r.Action, nil
	}
	return "", errors.New("the client's answer has no action accept, decline or cancel")
}

// clipText cuts s to n bytes at a character boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

var _ mcpcall.Elicitor = (*elicitor)(nil)
