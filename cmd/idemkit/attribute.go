package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/attribution"
	"github.com/idemkit-mcp/idemkit/cmd/idemkit/report"
)

func newAttributeCmd() *cobra.Command {
	var (
		format   string
		spansOut string
		htmlOut  string
		opts     attribution.Options
	)
	c := &cobra.Command{
		Use:   "attribute FILE",
		Short: "Classify the duplicate tool calls in an OTLP JSON file, offline",
		Long: `attribute reads spans as OTLP JSON (the Collector's file exporter output, one
export request per line, or any OTLP/JSON trace export; - for stdin), runs
them through the Collector's dup processor, and prints which tool calls were
duplicates, the layer that caused each (transport_retry, harness_retry,
model_reissue, reconnect_replay, unknown) and its effect (suppressed,
blocked, leaked). Diagnosis without deploying a Collector: every span in the
file is decided on all the evidence in the file.

--html writes the same report as a self-contained HTML page (the one the
demo writes): the duplicates by layer and effect per service, the gap from
each call to its duplicate, and each trace with a duplicate call by call.`,
		Example: `  idemkit attribute spans.jsonl
  idemkit attribute --format json spans.jsonl
  idemkit attribute --spans-out annotated.jsonl spans.jsonl
  idemkit attribute --html report.html spans.jsonl`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("attribute takes one FILE (OTLP JSON; - for stdin), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usagef("--format must be text or json, got %q", format)
			}
			var in io.Reader = c.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return fmt.Errorf("open the span file: %w", err)
				}
				defer f.Close()
				in = f
			}
			docs, err := attribution.Read(in)
			if err != nil {
				return fmt.Errorf("read %s: %w", args[0], err)
			}
			res, err := attribution.Run(c.Context(), docs, opts)
			if err != nil {
				return err
			}
			if spansOut != "" {
				f, err := os.Create(spansOut)
				if err != nil {
					return fmt.Errorf("--spans-out: %w", err)
				}
				if err := res.WriteSpans(f); err != nil {
					f.Close()
					return fmt.Errorf("--spans-out: %w", err)
				}
				if err := f.Close(); err != nil {
					return fmt.Errorf("--spans-out: %w", err)
				}
			}
			if htmlOut != "" {
				source := args[0]
				if source == "-" {
					source = "stdin"
				}
				if err := writeHTMLFile(htmlOut, res.Page(filepath.Base(source), time.Now())); err != nil {
					return fmt.Errorf("--html: %w", err)
				}
			}
			if format == "json" {
				return writeAttributionJSON(c.OutOrStdout(), res)
			}
			return res.WriteText(c.OutOrStdout())
		},
	}
	c.Flags().StringVar(&format, "format", "text", "output format: text (a summary to read) or json")
	c.Flags().StringVar(&htmlOut, "html", "", "also write the report as a self-contained HTML page to this file")
	c.Flags().StringVar(&spansOut, "spans-out", "", "also write the annotated spans to this file, one OTLP JSON export request per line")
	c.Flags().DurationVar(&opts.Window, "window", 0, "the processor's window: calls further apart are never duplicates (default 10m)")
	c.Flags().DurationVar(&opts.HarnessThreshold, "harness-threshold", 0, "the processor's harness_threshold: a quicker same-session repeat with no inference between is a harness retry (default 2s)")
	c.Flags().DurationVar(&opts.DeliberateRepeatGap, "deliberate-repeat-gap", 0, "the processor's deliberate_repeat_gap (default 2m)")
	return c
}

// attributionJSON is the --format json document.
type attributionJSON struct {
	Spans      int                       `json:"spans"`
	ToolSpans  int                       `json:"tool_spans"`
	Services   int                       `json:"services"`
	Counts     map[string]map[string]int `json:"counts"`
	Duplicates []duplicateJSON           `json:"duplicates"`
}

type duplicateJSON struct {
	Service     string    `json:"service"`
	Tool        string    `json:"tool"`
	Cause       string    `json:"cause"`
	Effect      string    `json:"effect"`
	Outcome     string    `json:"outcome,omitempty"`
	Group       string    `json:"group"`
	GapMS       int64     `json:"gap_ms"`
	Start       time.Time `json:"start"`
	TraceID     string    `json:"trace_id"`
	SpanID      string    `json:"span_id"`
	FirstSpanID string    `json:"first_span_id"`
}

// writeHTMLFile writes page to path through a temporary file, so that a
// reader never sees half of it.
func writeHTMLFile(path string, page *report.Page) error {
	var b bytes.Buffer
	if err := page.WriteHTML(&b); err != nil {
		return err
	}
	return writeFileAtomic(path, b.Bytes())
}

func writeAttributionJSON(w io.Writer, res *attribution.Result) error {
	doc := attributionJSON{Spans: res.Spans, ToolSpans: res.ToolSpans, Services: res.Services, Counts: res.Counts(), Duplicates: []duplicateJSON{}}
	for _, d := range res.Duplicates {
		doc.Duplicates = append(doc.Duplicates, duplicateJSON{
			Service: d.Service, Tool: d.Tool, Cause: d.Cause, Effect: d.Effect, Outcome: d.Outcome, Group: d.Group,
			GapMS: d.GapMS, Start: d.Start.UTC(), TraceID: d.TraceID, SpanID: d.SpanID, FirstSpanID: d.FirstSpanID,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
