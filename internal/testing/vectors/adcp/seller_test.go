package adcp

import (
	"fmt"
	"sync"
)

// The tools of the storyboard. create_media_buy is AdCP's canonical
// mutating task; get_media_buys the read that verifies the dedup;
// si_initiate_session a task whose context is a load-bearing string
// rather than the echo-back object (the SDK keeps it in the hash).
const (
	toolCreate  = "create_media_buy"
	toolList    = "get_media_buys"
	toolSession = "si_initiate_session"
)

// excluded is the hash exclusion list of each mutating tool, as the AdCP
// SDK applies it: idempotency_key (idemkit strips its key field by
// default), the echo-back context object, governance_context and the
// push notification credentials (nested: a JSON Pointer). The SI
// tool excludes nothing: its context string is part of the request.
var excluded = map[string][]string{
	toolCreate:  {"context", "governance_context", "/push_notification_config/authentication/credentials"},
	toolSession: nil,
}

// seller is a fake AdCP seller: the side effects every vector counts.
type seller struct {
	mu         sync.Mutex        // protects the fields below
	executions int               // handler runs of mutating tools (each one emits a webhook)
	buys       map[string]string // media_buy_id → principal's correlation ID at creation
	order      []string          // media_buy_ids in creation order
	sessions   int               // si_initiate_session runs
	failNext   int               // the next failNext creations fail with a tool error

	// hold, when set, blocks creations until it is closed, after sending
	// on started: the in-flight vector.
	hold    chan struct{}
	started chan struct{}
}

func newSeller() *seller { return &seller{buys: map[string]string{}} }

// toolAnswer is a tool's answer, before an SDK wraps it.
type toolAnswer struct {
	text       string
	structured map[string]any
	isError    bool
	writeID    string
}

// call runs tool with its decoded arguments.
func (s *seller) call(tool string, args map[string]any) toolAnswer {
	switch tool {
	case toolCreate:
		return s.createMediaBuy(args)
	case toolList:
		return s.getMediaBuys(args)
	case toolSession:
		s.mu.Lock()
		defer s.mu.Unlock()
		s.executions++
		s.sessions++
		id := fmt.Sprintf("si_%03d", s.sessions)
		return toolAnswer{text: "Session " + id + " started", structured: map[string]any{"session_id": id}, writeID: id}
	}
	return toolAnswer{text: "unknown tool " + tool, isError: true}
}

func (s *seller) createMediaBuy(args map[string]any) toolAnswer {
	s.mu.Lock()
	hold, started := s.hold, s.started
	s.mu.Unlock()
	if hold != nil {
		started <- struct{}{}
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executions++
	if s.failNext > 0 {
		s.failNext--
		return toolAnswer{text: "The ad server timed out; nothing was booked. Retry with the same idempotency_key.", isError: true}
	}
	id := fmt.Sprintf("mb_%03d", len(s.order)+1)
	corr := ""
	if c, ok := args["context"].(map[string]any); ok {
		corr, _ = c["correlation_id"].(string)
	}
	s.buys[id] = corr
	s.order = append(s.order, id)
	// The seller echoes the request's context, as AdCP asks.
	res := map[string]any{"media_buy_id": id, "status": "pending_activation", "context": args["context"]}
	return toolAnswer{text: "Media buy " + id + " created", structured: res, writeID: id}
}

func (s *seller) getMediaBuys(args map[string]any) toolAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	found := []any{}
	ids, _ := args["media_buy_ids"].([]any)
	for _, v := range ids {
		if id, ok := v.(string); ok {
			if _, ok := s.buys[id]; ok {
				found = append(found, map[string]any{"media_buy_id": id})
			}
		}
	}
	res := map[string]any{"media_buys": found, "total": len(s.order), "context": args["context"]}
	if k, ok := args["idempotency_key"]; ok {
		res["saw_idempotency_key"] = k != nil // what the read handler was handed
	}
	return toolAnswer{text: fmt.Sprintf("%d media buys", len(found)), structured: res}
}

func (s *seller) counts() (executions, buys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executions, len(s.order)
}
