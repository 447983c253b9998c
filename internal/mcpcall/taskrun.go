package mcpcall

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// The span of a task's background execution (see CreateTask). Its
// tools/call span ends when the task is created, before the work runs, so
// the write the work records is carried here. It is INTERNAL and has no
// gen_ai.operation.name: it is not a tool call of its own, and the
// duplicate processor does not count it as one.
const (
	// TaskRunSpanPrefix starts the span's name: "execute_task {tool}".
	TaskRunSpanPrefix = "execute_task "
	// TaskIDAttr (string) is the task's ID, as tasks/get takes it.
	TaskIDAttr = "idemkit.task.id"
)

// startTaskRun opens the span of task taskID's execution, a child of the
// span of the tools/call that created it (in ctx).
func (in *Instrumenter) startTaskRun(ctx context.Context, tool, taskID string) (context.Context, trace.Span) {
	return in.tracer.Start(ctx, TaskRunSpanPrefix+tool, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(spancontract.GenAIToolName, tool), attribute.String(TaskIDAttr, taskID)))
}

// endTaskRun ends a task execution's span with what the work recorded and
// how it ended: the write ID, the attempt, error.type tool_error for an
// isError result, _OTHER for a Go error.
func endTaskRun(span trace.Span, ctx context.Context, resp idemkit.Response, err error) {
	if span.IsRecording() {
		if n := idemkit.CallFromContext(ctx).Attempt(); n > 0 {
			span.SetAttributes(attribute.Int(spancontract.Attempt, n))
		}
		if resp.WriteID != "" {
			span.SetAttributes(attribute.String(spancontract.WriteID, resp.WriteID))
		}
		switch {
		case err != nil:
			span.SetAttributes(attribute.String(spancontract.ErrorType, spancontract.ErrorTypeOther))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case resp.IsError:
			span.SetAttributes(attribute.String(spancontract.ErrorType, spancontract.ErrorTypeToolError))
			span.SetStatus(codes.Error, spancontract.ErrorTypeToolError)
		}
	}
	span.End()
}
