// Package e2e holds the end-to-end tests: they run against a real test bed
// (package testbed), started for the run and torn down after it, or the one
// `make cluster-up` started, which they leave running.
package e2e
