// Command build writes the fastpathd image as an OCI archive, offline: for
// each static fastpathd binary given, one per architecture, an image of
// that binary and the PCI ID database in one layer, and an image index of
// them all, with every timestamp fixed, so the same commit gives the same
// digests.
//
//	build -binary bin/linux-amd64/fastpathd -binary bin/linux-arm64/fastpathd \
//	      -pci-ids pci.ids -pci-ids-version 0.0~2023.04.11-1 \
//	      -tag fastpath.local/fastpathd:v1 -o bin/fastpathd-image.tar
//
// It prints the image index's digest and each platform's manifest digest,
// one line each, every line starting with the archive's path.
//
// $SOURCE_DATE_EPOCH (the commit's time, from make image) is the image's
// creation time; without it, the Unix epoch.
package main
