// Command registry serves the test bed's images to a CRI-O node: the read
// side of the OCI distribution API over a directory the bed writes
// (testbed.RegistryHandler). The bed starts it; it is not for anything
// else.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

func main() {
	dir := flag.String("dir", "", "the registry's directory")
	listen := flag.String("listen", "", "the address to serve on (host:port)")
	flag.Parse()
	if *dir == "" || *listen == "" {
		fmt.Fprintln(os.Stderr, "registry: -dir and -listen are required")
		os.Exit(2)
	}
	srv := &http.Server{Addr: *listen, Handler: testbed.RegistryHandler(*dir), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "registry: serving %s on %s\n", *dir, *listen)
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}
