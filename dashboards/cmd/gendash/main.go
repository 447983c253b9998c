// Command gendash writes the dashboards of package build as the JSON files
// of the dashboards folder: go generate (in dashboards/) runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/idemkit-mcp/idemkit/dashboards/internal/build"
)

func main() {
	out := flag.String("out", ".", "the dashboards folder")
	flag.Parse()
	all, err := build.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, err := build.Render(all[name])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		path := filepath.Join(*out, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
