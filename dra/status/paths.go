package status

import (
	"path/filepath"
	"strings"
)

// Where a pod's containers find what fastpath hands them.
const (
	// DeviceInfoDir holds each request's NPWG device-info file:
	// <DeviceInfoDir>/<request>-device.json.
	DeviceInfoDir = "/var/run/k8s.cni.cncf.io/devinfo/dra"
	// XDPDir holds an afxdp request's pinned maps: <XDPDir>/<request>/.
	XDPDir = "/run/fastpath/xdp"
	// MemifDir holds a memif request's directory: <MemifDir>/<request>/,
	// with the socket memif.sock in it.
	MemifDir = "/run/fastpath/memif"
	// MemifSocketName is the socket's name in a memif directory.
	MemifSocketName = "memif.sock"
	// XSKMapPin is the XSKMAP's file in an XDP pin directory.
	XSKMapPin = "xsks"
)

// RequestFileName is a request's name as one path element: a subrequest
// req/sub becomes req_sub.
func RequestFileName(request string) string { return strings.ReplaceAll(request, "/", "_") }

// DeviceInfoPath is the request's device-info file in the containers.
func DeviceInfoPath(request string) string {
	return filepath.Join(DeviceInfoDir, RequestFileName(request)+"-device.json")
}

// XDPContainerDir is the request's XDP pin directory in the containers.
func XDPContainerDir(request string) string { return filepath.Join(XDPDir, RequestFileName(request)) }

// MemifContainerDir is the request's memif directory in the containers.
func MemifContainerDir(request string) string {
	return filepath.Join(MemifDir, RequestFileName(request))
}

// MemifContainerSocket is the request's memif socket in the containers.
func MemifContainerSocket(request string) string {
	return filepath.Join(MemifContainerDir(request), MemifSocketName)
}
