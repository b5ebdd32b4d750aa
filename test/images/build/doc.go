// Command build writes the fastpathd image as an OCI archive, offline: a
// static fastpathd and the PCI ID database in one layer, with every
// timestamp fixed, so the same commit gives the same digest.
//
//	build -binary bin/fastpathd -pci-ids /usr/share/misc/pci.ids \
//	      -tag fastpath.local/fastpathd:v1 -o bin/fastpathd-image.tar
//
// $SOURCE_DATE_EPOCH (the commit's time, from make image) is the image's
// creation time; without it, the Unix epoch.
package main
