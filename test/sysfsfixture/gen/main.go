// Command gen writes the named sysfs fixtures into a directory, one tree
// per fixture: go run ./test/sysfsfixture/gen devices/testdata/sysfs
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen DIR")
		os.Exit(2)
	}
	for name, tree := range sysfsfixture.Named() {
		dir := filepath.Join(os.Args[1], name)
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := tree.Write(dir); err != nil {
			fmt.Fprintf(os.Stderr, "write fixture %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}
