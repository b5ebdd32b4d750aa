// Package status reports what fastpath did: one ResourceClaim status
// writer for every driver and mode, keyed by claim, driver, pool and
// device, and the budget of API requests it shares with the daemon's
// other clients, which go first; the device status entries (KEP-4817
// conditions, data and networkData); the NPWG device-info document; the
// paths at which a pod finds its devices; and the node's labels of the
// PodNetworks it can attach, as they are judged elsewhere. It reports; it
// decides nothing.
package status
