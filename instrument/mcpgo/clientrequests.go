package mcpgo

import (
	"context"
	"errors"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// elicitor asks the user of the call's session (a human gate's question).
type elicitor struct{ ctx context.Context }

// CanElicit reports whether the session's client declared the elicitation
// capability.
func (e elicitor) CanElicit() bool {
	session := server.ClientSessionFromContext(e.ctx)
	if _, ok := session.(server.SessionWithElicitation); !ok {
		return false
	}
	ci, ok := session.(server.SessionWithClientInfo)
	return ok && ci.GetClientCapabilities().Elicitation != nil
}

func (e elicitor) Confirm(ctx context.Context, message string) (string, error) {
	s := server.ServerFromContext(ctx)
	if s == nil {
		return "", errNoServer
	}
	var req mcp.ElicitationRequest
	req.Params = mcp.ElicitationParams{Message: message, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}
	res, err := s.RequestElicitation(ctx, req)
	if err != nil {
		return "", err
	}
	return string(res.Action), nil
}

// errNoServer is returned by the request helpers outside an mcp-go
// request's context.
var errNoServer = errors.New("mcpgo: no mcp-go server in the context: call from a tool handler, with the context it was given")

// RequestElicitation is (*server.MCPServer).RequestElicitation for a tool
// handler: it asks the user through the client, and while the question is
// open it keeps the lease of the protected call the handler runs under
// (idemkit.Call.KeepAlive). A human who answers after the lease would
// otherwise find the call taken over by its retry: asked twice, the side
// effect done twice. mcp-go offers the middleware no way to see the
// requests a handler sends, so use these helpers in protected tools rather
// than the server's methods (the go-sdk adapter keeps the lease by
// itself). Outside a protected call it is the server's method. An error
// matching idemkit.ErrLeaseLost means the call was taken over meanwhile:
// do not act on the answer.
func RequestElicitation(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	s := server.ServerFromContext(ctx)
	if s == nil {
		return nil, errNoServer
	}
	var res *mcp.ElicitationResult
	err := idemkit.CallFromContext(ctx).KeepAlive(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.RequestElicitation(ctx, req)
		return err
	})
	return res, err
}

// RequestSampling is (*server.MCPServer).RequestSampling that keeps the
// protected call's lease while the client answers (see
// RequestElicitation).
func RequestSampling(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	s := server.ServerFromContext(ctx)
	if s == nil {
		return nil, errNoServer
	}
	var res *mcp.CreateMessageResult
	err := idemkit.CallFromContext(ctx).KeepAlive(ctx, func(ctx context.Context) error {
		var err error
		//lint:ignore SA1019 sampling is deprecated only from protocol 2026-07-28; clients of 2025-11-25 still answer it, and this helper keeps the lease while they do
		res, err = s.RequestSampling(ctx, req)
		return err
	})
	return res, err
}

// RequestRoots is (*server.MCPServer).RequestRoots that keeps the
// protected call's lease while the client answers (see
// RequestElicitation).
func RequestRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	s := server.ServerFromContext(ctx)
	if s == nil {
		return nil, errNoServer
	}
	var res *mcp.ListRootsResult
	err := idemkit.CallFromContext(ctx).KeepAlive(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.RequestRoots(ctx, req)
		return err
	})
	return res, err
}
