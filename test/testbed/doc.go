// Package testbed runs a real single-node Kubernetes on this machine for the
// end-to-end tests and the demo: etcd, kube-apiserver, kube-scheduler,
// kube-controller-manager, containerd with NRI, runc and a kubelet, built by
// test/deps.sh and started as plain processes bound to loopback and a private
// veth. It owns every process, mount, link and cgroup it creates and removes
// exactly those; it never touches what it did not create.
package testbed
