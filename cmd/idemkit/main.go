// Command idemkit is idemkit's one binary: the gateway that protects any MCP
// server, whatever its language, and the operator's tools.
//
//	go install github.com/idemkit-mcp/idemkit/cmd/idemkit@v0.1.0   (once published; until then
//	go install ./cmd/idemkit from the root of a clone, see the README's Install)
//
//	idemkit gateway --listen 127.0.0.1:8787 --upstream http://127.0.0.1:3000/mcp --store sqlite:idemkit.db
//	idemkit gateway --stdio --store sqlite:idemkit.db -- node server.js
//	idemkit migrate --store postgres://idemkit@db/idemkit
//	idemkit sweep --store sqlite:idemkit.db
//	idemkit inspect --store sqlite:idemkit.db 3f2a9c0e51d84b7a9e6f1c2d3b4a5968
//	idemkit inflight --store postgres://idemkit@db/idemkit
//	idemkit attribute spans.jsonl
//
// Exit status: 0 on success, 1 when the command failed, 2 when it was
// called wrongly (the message says what to change).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is an error in how the command was called: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "idemkit: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintln(stderr, "Run 'idemkit --help' or 'idemkit COMMAND --help' for usage.")
		return exitUsage
	}
	return exitFailure
}

// isCobraUsage reports cobra's own errors for bad flags and arguments.
func isCobraUsage(err error) bool {
	var fe *flagError
	return errors.As(err, &fe) || strings.HasPrefix(err.Error(), "unknown command ")
}

// flagError wraps cobra's flag parsing errors (see SetFlagErrorFunc).
type flagError struct{ err error }

func (e *flagError) Error() string { return e.err.Error() }
func (e *flagError) Unwrap() error { return e.err }

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "idemkit",
		Short: "Exactly-once tool calls for MCP servers, and the tools to see their duplicates",
		Long: `idemkit makes MCP servers' write tools safe to retry and makes duplicate tool
calls visible. Its gateway protects any MCP server, HTTP or stdio, in any
language: a repeated identical call is answered with the first one's result
instead of running twice, with spans and metrics for every call. The other
commands are the operator's tools for a store and for spans.

Stores are named by URL: memory, sqlite:PATH, postgres:DSN (or a
postgres:// URL).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       idemkit.Version,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &flagError{err} })
	root.SetVersionTemplate("idemkit {{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		newVersionCmd(),
		newGatewayCmd(),
		newMigrateCmd(),
		newSweepCmd(),
		newInspectCmd(),
		newInflightCmd(),
		newAttributeCmd(),
	)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), "idemkit", idemkit.Version)
			return nil
		},
	}
}

// noArgs rejects positional arguments with a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", c.CommandPath(), args)
	}
	return nil
}
