// Package cnipolicy reads a CNI plugin's configuration the way the plugin
// reads it, so that every path that runs a plugin for a tenant (the CNI
// driver's claims, NetworkAttachmentDefinitions, validate) judges the
// same thing the plugin will do.
//
// CNI plugins and libcni decode their configuration with encoding/json,
// which matches an object's keys to a struct's fields without regard to
// letter case, Unicode simple folding included ("Master", "MASTER" and
// "maſter" all set master). A field left out takes the plugin's default,
// and some defaults are objects of the host (macvlan's master is the
// node's default-route interface, bridge's bridge is cni0). Inspect lists
// what a configuration makes a plugin take from or change on the host,
// named or by default; the callers decide what their policy allows.
//
// It is pure: no I/O, no netlink, no Kubernetes client.
package cnipolicy
