// Command idemkit is idemkit's one binary: the gateway that protects any MCP
// server, and the operator's tools.
//
//	go install github.com/idemkit/idemkit/cmd/idemkit@latest
//	idemkit version
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/idemkit/idemkit/idemkit"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	switch args[0] {
	case "version":
		fmt.Fprintln(stdout, "idemkit", idemkit.Version)
		return 0
	}
	fmt.Fprintf(stderr, "idemkit: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `idemkit: exactly-once tool calls for MCP servers.

Usage:
  idemkit version   print the version
`)
}
