// Package status reports what fastpath did: one ResourceClaim status
// writer for every driver and mode, keyed by claim, driver, pool and
// device; the device status entries (KEP-4817 conditions, data and
// networkData); the NPWG device-info document; and the paths at which a
// pod finds its devices. It reports; it decides nothing.
package status
