// Package netapi serves the CRI Network API on the node: SetPodNetwork,
// RemovePodNetwork and ListPodNetwork over a unix socket (netapi.proto),
// backed by the node's registry of named networks, those set through the
// API (kept in the daemon's state directory) and "_fallback", the first
// configuration of the node's CNI configuration directory, watched. It
// reports each network's status truthfully: its configuration valid, its
// plugins installed, their CNI STATUS. It runs no plugin but STATUS, and
// attaches nothing to pods.
package netapi
