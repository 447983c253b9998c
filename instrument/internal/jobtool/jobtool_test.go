package jobtool

import (
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/instrument/jobs"
)

func TestStatusText_SaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		job  jobs.Job
		want string
	}{
		{jobs.Job{ID: "x", Tool: "export", State: jobs.Lost, Error: "its worker stopped before it finished"},
			"was lost: its worker stopped before it finished. It will not run again by itself. Check whether its effect happened"},
		{jobs.Job{ID: "x", Tool: "export", State: jobs.Cancelled, Error: "cancelled by the user"}, "was cancelled (cancelled by the user)"},
		{jobs.Job{ID: "x", Tool: "export", State: jobs.Running, Progress: 2, Total: 5, Message: "copying"},
			"is still running: 2 of 5 (copying). It has not failed. Do not start it again; call export_status again"},
		{jobs.Job{ID: "x", Tool: "export", State: jobs.Failed, Error: "disk full"}, "failed: disk full."},
	} {
		if got := statusText(&tc.job, "export_status"); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q does not contain %q", tc.job.State, got, tc.want)
		}
	}
}
