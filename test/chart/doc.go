// Package chart tests fastpath's Helm chart (deploy/helm/fastpath) offline,
// with the helm test/deps.sh builds: every documented value renders, the
// rendered objects are what the API server accepts, the schema refuses bad
// values naming the field, and the RBAC is what the daemon uses.
package chart
