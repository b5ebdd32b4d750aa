// Package migrate turns the SR-IOV Network Operator's objects
// (sriovnetwork.openshift.io/v1: SriovNetworkNodePolicy, SriovNetwork,
// SriovIBNetwork, SriovNetworkPoolConfig) and dra-driver-sriov's
// (sriovnetwork.k8snetworkplumbingwg.io/v1alpha1: SriovResourcePolicy,
// DeviceAttributes) into fastpath's objects that do the same:
// FastpathNodeConfigs, DeviceClasses, NetworkAttachmentDefinitions and
// example ResourceClaimTemplates, with a report of what has no equivalent
// (fastpathd migrate).
//
// The conversion is pure: it reads the objects it is given, never a
// cluster, and logs nothing; everything it cannot carry over is an Item of
// the report, naming the source object and field and saying what to do.
package migrate
