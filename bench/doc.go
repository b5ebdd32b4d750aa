// Package bench holds fastpath's go test benchmarks: attach and detach
// latency compared in the same run with the raw-netlink floor and the CNI
// path, preparation, discovery and publishing at scale, and the data path
// a pod gets (BenchmarkDatapath) against the same path built by hand.
package bench
