package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// NodeLabelPrefix is the prefix of the Node labels by which each node's
// fastpathd says which PodNetworks it can attach: the label
// NodeLabel(name), value "true", is on a node while its fastpathd has a
// configuration for the PodNetwork that it can run (the plugins are
// installed, the host interface the configuration names is there). A
// node's fastpathd writes these labels of its own node alone, and no other
// label.
const NodeLabelPrefix = "podnetwork." + Group + "/"

// SchedulingGate is the scheduling gate a pod that lists PodNetworks gets
// at admission, and keeps until every PodNetwork and PodNetworkAttachment
// it lists exists, is Ready and enabled (the KEP's active validation), and
// some node can attach them.
const SchedulingGate = Group + "/networks"

// NodeLabel is the Node label that says a node attaches the PodNetwork
// name: NodeLabelPrefix and the name, or, for a name longer than a
// label's name may be (63 characters), "h." and the first 56 hex digits
// of the name's SHA-256.
func NodeLabel(name string) string {
	if len(name) <= 63 {
		return NodeLabelPrefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return NodeLabelPrefix + "h." + hex.EncodeToString(sum[:])[:56]
}

// IsNodeLabel says whether key is one of the labels of NodeLabel.
func IsNodeLabel(key string) bool { return strings.HasPrefix(key, NodeLabelPrefix) }
