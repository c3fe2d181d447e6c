// Command releasetool plans and makes the releases of the repository's
// modules, and checks their APIs against the last release. It is run by
// scripts/release and scripts/apicheck, from the repository's root; see
// CONTRIBUTING.md, "Releasing".
//
//	releasetool plan [-dry-run]       tag the modules whose next version is not tagged yet
//	releasetool apicheck -apidiff BIN [-v] compare each module's API with its last release
//	                                       (-v also lists every compatible change)
//
// It needs only the go and git commands (and, for apicheck, the apidiff
// binary the script installs), and never pushes anything.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "releasetool:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: releasetool plan [-dry-run] | apicheck -apidiff BIN [-v]")
	}
	switch args[0] {
	case "plan":
		fs := flag.NewFlagSet("release", flag.ContinueOnError)
		dry := fs.Bool("dry-run", false, "print the tags and require bumps, change nothing")
		root := fs.String("C", ".", "repository root")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return release(*root, *dry, out)
	case "apicheck":
		fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
		apidiff := fs.String("apidiff", "apidiff", "the apidiff binary")
		root := fs.String("C", ".", "repository root")
		verbose := fs.Bool("v", false, "list every compatible change, not only their count")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return apicheck(*root, *apidiff, *verbose, out)
	}
	return fmt.Errorf("unknown command %q", args[0])
}
