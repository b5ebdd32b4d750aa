// Package dataplane puts prepared devices into pods and takes them back: the
// NRI plugin hooks, the one-move netns attach and its restore, VF settings
// through the PF, driver binding and CNI invocation. It never talks to the
// Kubernetes API server.
package dataplane
