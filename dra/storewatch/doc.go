// Package storewatch watches whether the claim store can write its files:
// a write that failed (a full disk, a filesystem gone read-only), or a
// filesystem with less room left than the store's writes take. It says so
// on the Node, in the metrics and to the readiness probe, and tells the
// drivers to refuse new claims while it lasts; it changes no claim.
package storewatch
