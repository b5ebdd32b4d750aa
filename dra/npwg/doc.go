// Package npwg holds fastpath's reading and writing of the Network Plumbing
// WG multi-network standard (v1.3): the pod's network selection annotation,
// interface names unique in the pod, which namespaces' networks a pod may
// use, a NetworkAttachmentDefinition's CNI configuration and the rules a
// node holds it to (ConfigRules), the runtime configuration of one
// attachment, and the network-status annotation. It is pure: it reads only the CNI configuration directory it is given, and
// it runs no plugin and talks to no API server.
package npwg
