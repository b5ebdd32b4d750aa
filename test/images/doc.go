// Package images builds container images offline: no registry is needed.
// An image is one layer of static binaries and data files, written as a
// docker-archive tar (the test bed's workload and pause images) or as an OCI
// archive (the fastpathd image of make image: an image index of one image
// per architecture, linux/amd64 and linux/arm64), both of which
// `ctr images import` accepts. The same content always gives the same bytes.
package images
