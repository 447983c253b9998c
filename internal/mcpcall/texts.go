package mcpcall

import (
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

func replayMarker(attempt int, writeID string) map[string]any {
	m := map[string]any{"replayed": true, "attempt": attempt}
	if writeID != "" {
		m["write_id"] = writeID
	}
	return m
}

// inProgressMarker returns the refusal marker's extra entries of an
// in-progress answer; retryAfter is the hint (see DefaultRetryAfter), given
// when the running attempt's lease is known.
func inProgressMarker(e *idemkit.InProgressError, retryAfter time.Duration) map[string]any {
	m := map[string]any{"attempt": e.Attempt}
	if e.StatusTool != "" {
		m["status_tool"] = e.StatusTool
	}
	if e.RetryAfter > 0 {
		m["retry_after_ms"] = max(retryAfter.Round(time.Millisecond).Milliseconds(), 1)
	}
	return m
}

func rejectedText(tool string, err error) string {
	reason := strings.TrimPrefix(err.Error(), "idemkit: ")
	return "The " + tool + " call was rejected and nothing was done: " + reason +
		". Fix the request and call " + tool + " again."
}

func unavailableText(tool string) string {
	return "The " + tool + " call was not run: the server could not check whether this request already ran, because its idempotency store is unavailable. " +
		"Nothing was done. Retry the same call in a few seconds."
}

func storeFullText(tool string) string {
	return "The " + tool + " call was not run: the server is at capacity (its idempotency store holds as many recent calls as it may keep), " +
		"so it cannot make a retry of this call safe. Nothing was done. Retry the same call later, in a minute or more."
}

func storeFullMarker(e *idemstore.StoreFullError) map[string]any {
	if e.RetryAfter <= 0 {
		return nil
	}
	return map[string]any{"retry_after_ms": e.RetryAfter.Round(time.Millisecond).Milliseconds()}
}

func rolledBackText(tool string) string {
	return "The " + tool + " call was not completed: its database transaction could not be committed, so nothing it did was kept. " +
		"Nothing was done. Retry the same call in a few seconds."
}

func unreadableText(tool string) string {
	return "The " + tool + " call with these arguments already ran, but its stored result could not be read. " +
		"Do not call it again: the work is done."
}

// How a call whose result could not be encoded ended (see unencodable).
type unencodableKind uint8

const (
	unencodableKept       unencodableKind = iota // recorded as done, without its result
	unencodableReleased                          // not recorded: a tool error, or the store failed
	unencodableRolledBack                        // its transaction rolled back
)

func unencodableText(tool string, err error, kind unencodableKind) string {
	why := strings.TrimPrefix(err.Error(), "the result could not be encoded: ")
	switch kind {
	case unencodableKept:
		return "The " + tool + " call ran and its work is done, but its result could not be encoded (" + why + "), so it cannot be shown. " +
			"Do not call it again: a repeat of this call is answered that it already ran, and does nothing. " +
			"Tell the user the action completed but its result could not be returned."
	case unencodableRolledBack:
		return "The " + tool + " call's result could not be encoded (" + why + "), so its database transaction was rolled back and nothing it did was kept. " +
			"Nothing was done. Calling it again will fail the same way until the tool is fixed: tell the user."
	}
	return "The " + tool + " call ran, but its result could not be encoded (" + why + "), so it cannot be shown, and it was not recorded. " +
		"Check whether the action happened before calling it again."
}

func unscopedText(tool string, advice func(string) string) string {
	text := "The " + tool + " call was refused and nothing was done: this server cannot tell which caller sent it, " +
		"so it cannot make a retry of it safe. "
	if advice != nil {
		return text + advice(tool)
	}
	return text + "Do not retry it: tell the user that " + tool +
		" needs the server's operator to configure caller authentication (or authenticated sessions) before it can be used."
}
