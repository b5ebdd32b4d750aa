// Package images builds the test bed's container images offline: no registry
// is needed. An image is one layer of static binaries written as a
// docker-archive tar that `ctr images import` accepts.
package images
