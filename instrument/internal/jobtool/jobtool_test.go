package jobtool

import (
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/instrument"
)

func TestStatusText_SaysWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		job  instrument.Job
		want string
	}{
		{instrument.Job{ID: "x", Tool: "export", State: instrument.JobLost, Error: "its worker stopped before it finished"},
			"was lost: its worker stopped before it finished. It will not run again by itself. Check whether its effect happened"},
		{instrument.Job{ID: "x", Tool: "export", State: instrument.JobCancelled, Error: "cancelled by the user"}, "was cancelled (cancelled by the user)"},
		{instrument.Job{ID: "x", Tool: "export", State: instrument.JobRunning, Progress: 2, Total: 5, Message: "copying"},
			"is still running: 2 of 5 (copying). It has not failed. Do not start it again; call export_status again"},
		{instrument.Job{ID: "x", Tool: "export", State: instrument.JobFailed, Error: "disk full"}, "failed: disk full."},
	} {
		if got := statusText(&tc.job, "export_status"); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q does not contain %q", tc.job.State, got, tc.want)
		}
	}
}
