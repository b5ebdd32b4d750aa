// Package metrics is fastpathd's Prometheus metrics (prefix fastpath_):
// how Prepare, Unprepare and the runtime's hooks went and how long they
// took, attach and detach latency, what the node publishes, and what is
// attached and pending now. A nil *Metrics records nothing, so that parts
// run without metrics in tests.
package metrics
