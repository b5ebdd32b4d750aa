package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAttach-2   	      64	  17000000 ns/op	   29339 B/op	     243 allocs/op
BenchmarkAttach-2   	      70	  18000000 ns/op	   29337 B/op	     243 allocs/op
BenchmarkAttach-2   	      70	  16000000 ns/op	   29333 B/op	     243 allocs/op
BenchmarkFloor/attach-2  	      61	  17500000 ns/op	   19640 B/op	     152 allocs/op
BenchmarkFloor/attach-2  	      61	  17500000 ns/op	   19640 B/op	     152 allocs/op
BenchmarkCNI/host-device-2         	      21	  60000000 ns/op	   64900 B/op	     950 allocs/op
BenchmarkAttachScale/pods=16/workers=1-2        	       4	 277569318 ns/op	  17348082 ns/attach	  469962 B/op	    3895 allocs/op
PASS
`

func TestSummary(t *testing.T) {
	runs, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := median(runs["Attach"]); got != 17000000 {
		t.Errorf("median attach = %v", got)
	}
	if len(runs["AttachScale/pods=16/workers=1"]) != 1 {
		t.Errorf("scale runs = %v", runs)
	}
	table := render(runs)
	for _, want := range []string{
		"| Attach | 3 | 17ms |",
		"| attach / floor | 0.97x | <= 1.05 | yes |",
		"| CNI host-device / attach | 3.53x | >= 3 | yes |",
		"| detach / floor | not measured |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := os.WriteFile(path, []byte("# Results\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run replaces the section, not adds another
		if err := rewrite(path, beginMarker+"\nSUMMARY\n"+endMarker+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	if strings.Count(string(data), "SUMMARY") != 1 || !strings.Contains(string(data), "hand-written") {
		t.Errorf("rewritten file:\n%s", data)
	}
}

const datapathSample = `BenchmarkDatapath/afxdp-2   	 1000000	       200.0 ns/op	        18.0 hand-p99-µs	   5000000 hand-pkt/s	       200.0 hand-ns/pkt	        20.0 p99-µs	   5000000 pkt/s	         1.000 x-hand
BenchmarkDatapath/udp-2     	 1000000	      1000 ns/op	        12.0 hand-p99-µs	    980392 hand-pkt/s	      1020 hand-ns/pkt	        10.0 p99-µs	   1000000 pkt/s	         1.020 x-hand
BenchmarkDatapath/macvlan-2 	 1000000	      1100 ns/op	        12.0 hand-p99-µs	   1000000 hand-pkt/s	      1000 hand-ns/pkt	        10.0 p99-µs	    909091 pkt/s	         0.909 x-hand
`

// The data-path set: ratios of packets per second (the inverse of ns/op),
// the metrics beside each median, and a section of its own.
func TestSummaryDatapath(t *testing.T) {
	runs, err := parse(strings.NewReader(datapathSample))
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]map[string][]float64{}
	for _, unit := range append(sets["datapath"].metrics, "hand-ns/pkt") {
		if metrics[unit], err = parseUnit(strings.NewReader(datapathSample), unit); err != nil {
			t.Fatal(err)
		}
	}
	table := renderSet(runs, sets["datapath"], metrics)
	for _, want := range []string{
		"| benchmark | runs | median | pkt/s | hand-pkt/s | x-hand | p99-µs | hand-p99-µs |",
		"| Datapath/afxdp | 1 | 200ns | 5,000,000 | 5,000,000 | 1.000 | 20.0 | 18.0 |",
		"| AF_XDP: fastpath / by hand (pkt/s) | 1.00x | >= 0.95 | yes |",
		"| netdev, kernel UDP: fastpath / by hand (pkt/s) | 1.02x | >= 0.95 | yes |",
		"| macvlan, kernel UDP: fastpath / by hand (pkt/s) | 0.91x | >= 0.95 | no |",
		"| AF_XDP (fastpath) / kernel UDP (by hand) (pkt/s) | 5.10x | >= 1.5 | yes |",
		"| AF_XDP (fastpath) / kernel UDP (by hand) (pkt/s) | 5.10x | >= 1.5 | yes |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "attach / floor") {
		t.Errorf("the data-path table has the attach ratios:\n%s", table)
	}
	path := filepath.Join(t.TempDir(), "RESULTS.md")
	if err := os.WriteFile(path, []byte("# Results\n\n"+beginMarker+"\nSUMMARY\n"+endMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := sets["datapath"]
	for range 2 {
		if err := rewriteSection(path, st.begin+"\nDATAPATH\n"+st.end+"\n", st.begin, st.end); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(path)
	if strings.Count(string(data), "DATAPATH") != 1 || strings.Count(string(data), "SUMMARY") != 1 {
		t.Errorf("rewritten file:\n%s", data)
	}
}

// TestNotResults: a failed benchmark's message reaches stderr; results and
// go test's header lines do not.
func TestNotResults(t *testing.T) {
	out := "goos: linux\npkg: x\nBenchmarkDatapath/udp-2 \t 100000\t 1819 ns/op\t 549702 pkt/s\n" +
		"--- FAIL: BenchmarkDatapath/memif\n    memif_test.go:52: the pod's testpmd received []\n        EAL: cannot init\nFAIL\nexit status 1\nPASS\nok  \tx\t1.0s\n"
	want := "--- FAIL: BenchmarkDatapath/memif\n    memif_test.go:52: the pod's testpmd received []\n        EAL: cannot init\nFAIL\nexit status 1\n"
	if got := notResults(out); got != want {
		t.Errorf("notResults:\n%s\nwant:\n%s", got, want)
	}
}
