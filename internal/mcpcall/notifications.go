package mcpcall

import "strings"

// The notifications an MCP client sends a server. Each gets a SERVER span
// named after its method (no target), with mcp.method.name, and its
// mcp.server.operation.duration, as the semantic conventions define for
// notifications; it has no jsonrpc.request.id. Other "notifications/…"
// methods are recorded as "_OTHER", so that a client cannot grow the span
// names' and metrics' cardinality.
const (
	NotificationInitialized      = "notifications/initialized"
	NotificationCancelled        = "notifications/cancelled"
	NotificationProgress         = "notifications/progress"
	NotificationRootsListChanged = "notifications/roots/list_changed"
	NotificationTasksStatus      = "notifications/tasks/status"
)

// IsNotification reports whether method names a notification.
func IsNotification(method string) bool { return strings.HasPrefix(method, "notifications/") }
