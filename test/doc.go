// Package test is the root of fastpath's test harness: the test bed (a real
// single-node Kubernetes), offline container images and the end-to-end
// tests. deps.sh installs and builds what they need.
package test
