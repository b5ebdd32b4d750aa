#!/usr/bin/env bash
# deps.sh installs what building and testing fastpath needs and is missing:
# Debian packages, and the Kubernetes node components, helm and golangci-lint
# built from the Go module proxy. Builds are cached outside the repository, one directory per component
# and version, so a warm run only checks that they are there.
#
#   test/deps.sh [all|apt|fast|lint|proto|testbed|image|vm|env]
#
# fast is what make fast (generated, lint, unit) needs: the Debian packages
# (clang and libbpf for go generate, pci.ids for the unit tests), the protoc
# plugins, golangci-lint and helm; not the test bed's nor the VM's builds.
#
# image is the PCI ID database of the fastpathd image: Debian's pci.ids
# package at the version of test/images/versions.env, downloaded with apt
# and unpacked into the cache (never installed), so the image's database is
# the pinned one whatever the build host has installed.
#
# FASTPATH_CACHE (default ~/.cache/fastpath) holds the builds.
set -euo pipefail

CACHE=${FASTPATH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastpath}
# shellcheck source=testbed/versions.env
source "$(dirname "${BASH_SOURCE[0]}")/testbed/versions.env"
# A bed of another release (make e2e-matrix): its Kubernetes (the staging
# modules at the matching v0 version) and its containerd.
if [ -n "${FASTPATH_K8S_VERSION:-}" ]; then
	K8S_VERSION=$FASTPATH_K8S_VERSION
	K8S_STAGING=v0.${K8S_VERSION#v1.}
fi
CONTAINERD_VERSION=${FASTPATH_CONTAINERD_VERSION:-$CONTAINERD_VERSION}
# shellcheck source=vm/versions.env
source "$(dirname "${BASH_SOURCE[0]}")/vm/versions.env"
# shellcheck source=images/versions.env
source "$(dirname "${BASH_SOURCE[0]}")/images/versions.env"

APT_PACKAGES=(clang llvm libbpf-dev libseccomp-dev pkg-config iproute2 iputils-ping ethtool pci.ids util-linux kmod protobuf-compiler)
# The test bed's too: dpdk-testpmd and its memif PMD, for the dpdk image
# (test/testbed/images.go); conmon, CRI-O's container monitor on the CRI-O
# node (FASTPATH_RUNTIME=crio).
TESTBED_APT_PACKAGES=(dpdk-dev conmon)
# The SR-IOV VM's workloads, run in the guest from the host's root it
# mounts: dpdk-testpmd (TESTBED_APT_PACKAGES), the rdma tool, the verbs
# providers (soft-RoCE's among them), ibv_devinfo, rping and ib_write_bw.
VM_APT_PACKAGES=(iproute2 rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest)

# The protoc plugins of the generated gRPC code (dra/netapi): protoc-gen-go
# at the google.golang.org/protobuf of go.mod, so the generated code and the
# runtime it calls agree; protoc-gen-go-grpc is a module of its own.
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
protobuf_version() {
	sed -n 's/^[[:space:]]*google.golang.org\/protobuf \(v[^ ]*\).*/\1/p' "$REPO/go.mod"
}

log() { printf '[deps %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

bindir() { # component version
	printf '%s/bin/%s-%s\n' "$CACHE" "$1" "$2"
}

# cached COMPONENT VERSION FUNC: runs FUNC OUTDIR unless the build is there;
# builds into a temporary directory and renames it, so a failed build leaves
# nothing that looks complete.
cached() {
	local name=$1 version=$2 fn=$3 dir tmp
	dir=$(bindir "$name" "$version")
	if [ -f "$dir/.complete" ]; then
		return 0
	fi
	tmp=$dir.tmp.$$
	rm -rf "$tmp" && mkdir -p "$tmp"
	log "building $name $version (log: $CACHE/log/$name-$version.log)"
	mkdir -p "$CACHE/log"
	local t0=$SECONDS
	if ! "$fn" "$tmp" >"$CACHE/log/$name-$version.log" 2>&1; then
		tail -n 30 "$CACHE/log/$name-$version.log" >&2
		rm -rf "$tmp"
		die "building $name $version failed; full log: $CACHE/log/$name-$version.log"
	fi
	touch "$tmp/.complete"
	rm -rf "$dir" && mv "$tmp" "$dir"
	log "built $name $version in $((SECONDS - t0))s"
}

install_apt() {
	local missing=() p
	for p in "${APT_PACKAGES[@]}" "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	apt-get update -qq || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
}

build_kubernetes() { # out
	# k8s.io/kubernetes carries replace directives for its staging modules, so
	# `go install pkg@version` refuses it: build through a wrapper module that
	# maps each staging module to its published version.
	local out=$1 src=$CACHE/src/kubernetes-$K8S_VERSION modfile minor ld p
	mkdir -p "$src" && cd "$src"
	go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
	modfile=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
	{
		printf 'module fastpath.local/kubernetes\n\ngo 1.25.0\n\ngodebug default=go1.25\n\n'
		printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
		grep '=> ./staging' "$modfile" | awk -v v="$K8S_STAGING" '{print "\t" $1 " => " $1 " " v}'
		printf ')\n'
	} >go.mod
	cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
	go mod tidy
	minor=${K8S_VERSION#v1.}
	minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done
	CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$out/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
		k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kubectl
}

build_etcd() { # out
	local out=$1 src=$CACHE/src/etcd-$ETCD_VERSION
	mkdir -p "$src" && cd "$src"
	printf 'module fastpath.local/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >go.mod
	printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >tools.go
	go mod tidy
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
}

build_containerd() { # out
	local out=$1 mod=github.com/containerd/containerd/v2 src=$CACHE/src/containerd-$CONTAINERD_VERSION dir
	case $CONTAINERD_VERSION in v1.*) mod=github.com/containerd/containerd ;; esac
	local ld="-s -w -X $mod/version.Version=$CONTAINERD_VERSION"
	if GOBIN=$out CGO_ENABLED=0 go install -trimpath -ldflags "$ld" \
		"$mod/cmd/containerd@$CONTAINERD_VERSION" \
		"$mod/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"$mod/cmd/ctr@$CONTAINERD_VERSION"; then
		return 0
	fi
	# containerd 1.7 and 2.0 carry exclude directives, which go install
	# pkg@version refuses: built in the module's own tree instead.
	dir=$(go mod download -json "$mod@$CONTAINERD_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "$mod@$CONTAINERD_VERSION: no module directory" >&2; return 1; }
	rm -rf "$src" && mkdir -p "$(dirname "$src")" && cp -r "$dir" "$src" && chmod -R u+w "$src"
	cd "$src" && rm -rf vendor
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$out/" ./cmd/containerd ./cmd/containerd-shim-runc-v2 ./cmd/ctr
}

build_runc() { # out
	GOBIN=$1 CGO_ENABLED=1 go install -trimpath -tags seccomp -ldflags "-s -w" \
		"github.com/opencontainers/runc@$RUNC_VERSION"
}

build_crio() { # out
	# CRI-O from the module proxy's zip (`go install pkg@version` asks the
	# proxy for the module's version list, which it refuses), without the
	# graph drivers and the GPG library a node does not need here; and pinns,
	# its namespace pinner, from the same source.
	local out=$1 src=$CACHE/src/cri-o-$CRIO_VERSION dir
	dir=$(go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "github.com/cri-o/cri-o@$CRIO_VERSION: no module directory" >&2; return 1; }
	rm -rf "$src" && mkdir -p "$(dirname "$src")" && cp -r "$dir" "$src" && chmod -R u+w "$src"
	cd "$src"
	CGO_ENABLED=1 go build -trimpath -ldflags "-s -w" \
		-tags 'containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper' \
		-o "$out/crio" ./cmd/crio
	make -C pinns >/dev/null
	cp bin/pinns "$out/pinns"
}

build_cni_plugins() { # out
	local p pkgs=()
	for p in main/bridge main/loopback main/host-device main/macvlan ipam/host-local ipam/static meta/tuning; do
		pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION")
	done
	GOBIN=$1 CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "${pkgs[@]}"
}

build_helm() { # out
	GOBIN=$1 CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

build_protoc_gen() { # out
	GOBIN=$1 CGO_ENABLED=0 go install -trimpath "google.golang.org/protobuf/cmd/protoc-gen-go@$(protobuf_version)" &&
		GOBIN=$1 CGO_ENABLED=0 go install -trimpath "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
}

proto() {
	command -v go >/dev/null || die "go is not on PATH"
	cached protoc-gen "$(protobuf_version)-grpc-$PROTOC_GEN_GO_GRPC_VERSION" build_protoc_gen
}

build_golangci_lint() { # out
	GOBIN=$1 go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
}

testbed() {
	command -v go >/dev/null || die "go is not on PATH"
	cached kubernetes "$K8S_VERSION" build_kubernetes
	cached etcd "$ETCD_VERSION" build_etcd
	cached containerd "$CONTAINERD_VERSION" build_containerd
	cached runc "$RUNC_VERSION" build_runc
	cached crio "$CRIO_VERSION" build_crio
	cached cni-plugins "$CNI_PLUGINS_VERSION" build_cni_plugins
	cached helm "$HELM_VERSION" build_helm
	# The e2e suite feeds the daemon's metrics through the alert rules.
	promtool
}

# unit: what the unit and privileged tests need beyond apt's packages: the
# reference CNI plugins their runs of libcni execute.
unit() {
	command -v go >/dev/null || die "go is not on PATH"
	cached cni-plugins "$CNI_PLUGINS_VERSION" build_cni_plugins
}

lint() {
	cached golangci-lint "$GOLANGCI_LINT_VERSION" build_golangci_lint
	cached helm "$HELM_VERSION" build_helm
	promtool
}

# promtool, which make lint checks and tests the chart's alert rules with:
# Debian's prometheus package at the version the mirror offers, unpacked
# into the cache (never installed), one directory per version.
promtool_version() {
	apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" { print $2 }'
}

build_promtool() { # out
	unpack_deb "prometheus=$PROMTOOL_VERSION" "$1"
	[ -x "$1/usr/bin/promtool" ] || { echo "prometheus $PROMTOOL_VERSION has no usr/bin/promtool" >&2; return 1; }
}

promtool() {
	PROMTOOL_VERSION=$(promtool_version)
	if [ -z "$PROMTOOL_VERSION" ]; then
		apt_update_once
		PROMTOOL_VERSION=$(promtool_version)
	fi
	[ -n "$PROMTOOL_VERSION" ] || die "the apt mirror offers no prometheus package (promtool)"
	cached promtool "$PROMTOOL_VERSION" build_promtool
}

# --- The SR-IOV VM (test/vm): QEMU with the emulated igb NIC, and a Debian
# kernel and busybox fetched with apt and unpacked into the cache (never
# installed on this machine).

qemu_has_igb() {
	command -v qemu-system-x86_64 >/dev/null && qemu-system-x86_64 -device help 2>/dev/null | grep -q '^name "igb"'
}

APT_UPDATED=
apt_update_once() {
	[ -n "$APT_UPDATED" ] && return 0
	apt-get update -qq || die "apt-get update failed"
	APT_UPDATED=1
}

install_qemu() {
	qemu_has_igb && return 0
	local codename target=()
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	if [ "$codename" = bookworm ]; then
		# bookworm's QEMU 7.2 has no igb device; bookworm-backports has QEMU 10.
		if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
			log "adding bookworm-backports to apt's sources"
			printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
				'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
				>/etc/apt/sources.list.d/fastpath-bookworm-backports.sources
		fi
		target=(-t bookworm-backports)
	fi
	apt_update_once
	log "installing qemu-system-x86 ${target[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" qemu-system-x86 >/dev/null ||
		die "apt-get install qemu-system-x86 failed"
	qemu_has_igb || die "$(command -v qemu-system-x86_64) has no igb device"
}

# unpack_deb PACKAGE OUT: downloads PACKAGE with apt and unpacks it into OUT.
unpack_deb() {
	local pkg=$1 out=$2 dl
	dl=$(mktemp -d)
	chown _apt "$dl" 2>/dev/null || true
	(cd "$dl" && apt-get download "$pkg") || { rm -rf "$dl"; return 1; }
	dpkg-deb -x "$dl"/*.deb "$out" && dpkg-deb -f "$dl"/*.deb Package Version >"$out/.package"
	rm -rf "$dl"
}

build_vm_kernel() { # out
	local kver
	unpack_deb "$VM_KERNEL" "$1"
	kver=$(basename "$(ls -d "$1"/lib/modules/*)")
	depmod -b "$1" "$kver"
}

# fetch_deb SUITE PACKAGE VERSION OUT: downloads PACKAGE at VERSION from
# SUITE of the Debian mirror, by the suite's package index, checks it
# against the index's SHA256 and unpacks it into OUT. For a suite this
# machine's apt does not list (trixie-backports on Debian 12): nothing is
# added to apt's sources, and nothing is installed.
DEBIAN_MIRROR=${FASTPATH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
fetch_deb() {
	local suite=$1 pkg=$2 version=$3 out=$4 dl entry file sum
	suite_index "$suite" >/dev/null || return 1
	dl=$(mktemp -d)
	entry=$(awk -v p="$pkg" -v v="$version" 'BEGIN { RS = ""; FS = "\n" } {
		pk = ve = fn = sh = ""
		for (i = 1; i <= NF; i++) {
			if ($i ~ /^Package: /) pk = substr($i, 10)
			else if ($i ~ /^Version: /) ve = substr($i, 10)
			else if ($i ~ /^Filename: /) fn = substr($i, 11)
			else if ($i ~ /^SHA256: /) sh = substr($i, 9)
		}
		if (pk == p && ve == v) { print fn, sh; exit }
	}' "$CACHE/bin/Packages-$suite")
	read -r file sum <<<"$entry"
	if [ -z "$file" ]; then
		rm -rf "$dl"
		echo "$pkg $version is not in $suite (the newest there: $(awk -v p="$pkg" '$0 == "Package: " p { getline; print $2 }' "$CACHE/bin/Packages-$suite" | sort -V | tail -n 1))" >&2
		return 1
	fi
	curl -fsSL -o "$dl/pkg.deb" "$DEBIAN_MIRROR/$file" || { rm -rf "$dl"; return 1; }
	echo "$sum  $dl/pkg.deb" | sha256sum -c --quiet - || { rm -rf "$dl"; echo "$file: SHA256 is not the index's" >&2; return 1; }
	dpkg-deb -x "$dl/pkg.deb" "$out" && echo "$pkg $version" >>"$out/.package"
	rm -rf "$dl"
}

# suite_index SUITE: the suite's package index, fetched at most hourly.
suite_index() {
	local suite=$1 tmp
	if [ ! -s "$CACHE/bin/Packages-$suite" ] || [ -n "$(find "$CACHE/bin/Packages-$suite" -mmin +60)" ]; then
		mkdir -p "$CACHE/bin"
		tmp=$(mktemp "$CACHE/bin/Packages-$suite.XXXXXX")
		curl -fsSL "$DEBIAN_MIRROR/dists/$suite/main/binary-amd64/Packages.xz" | xz -dc >"$tmp" ||
			{ rm -f "$tmp"; echo "the package index of $suite: not read from $DEBIAN_MIRROR" >&2; return 1; }
		mv "$tmp" "$CACHE/bin/Packages-$suite"
	fi
	echo "$CACHE/bin/Packages-$suite"
}

# vm_kernel7 prints the 7.x kernel's release and version: the pinned ones,
# or, when the suite no longer has them, those its linux-image-amd64 now
# depends on (remembered, so that `env` agrees without asking the mirror).
vm_kernel7() {
	if [ -f "$(bindir vm-kernel "$VM_KERNEL7_RELEASE")/.complete" ] || [ "${1:-}" = offline ]; then
		if [ "${1:-}" = offline ] && [ -s "$CACHE/bin/vm-kernel7.fallback" ] && [ ! -f "$(bindir vm-kernel "$VM_KERNEL7_RELEASE")/.complete" ]; then
			cat "$CACHE/bin/vm-kernel7.fallback"
		else
			echo "$VM_KERNEL7_RELEASE $VM_KERNEL7_VERSION"
		fi
		return 0
	fi
	local index dep
	index=$(suite_index "$VM_KERNEL7_SUITE") || return 1
	if grep -qx "Package: linux-modules-$VM_KERNEL7_RELEASE" "$index" && grep -qx "Version: $VM_KERNEL7_VERSION" "$index"; then
		echo "$VM_KERNEL7_RELEASE $VM_KERNEL7_VERSION"
		return 0
	fi
	dep=$(awk 'BEGIN { RS = ""; FS = "\n" } $1 == "Package: linux-image-amd64" { for (i = 1; i <= NF; i++) if ($i ~ /^Depends: /) print $i }' "$index" |
		sed -n 's/.*linux-image-\([0-9][^ ]*-amd64\) (= \([^)]*\)).*/\1 \2/p' | sort -V | tail -n 1)
	[ -n "$dep" ] || die "kernel $VM_KERNEL7_RELEASE $VM_KERNEL7_VERSION is not in $VM_KERNEL7_SUITE, and no linux-image-amd64 there"
	log "warning: kernel $VM_KERNEL7_RELEASE $VM_KERNEL7_VERSION is no longer in $VM_KERNEL7_SUITE; using $dep (pin it in test/vm/versions.env)"
	echo "$dep" >"$CACHE/bin/vm-kernel7.fallback"
	echo "$dep"
}

# build_vm_kernel7 OUT: the 7.x kernel: its image, its modules and their
# lists (modules.builtin, in linux-base).
# They install under usr/lib/modules/RELEASE (vmlinuz there too): laid out
# here as the 6.12 package is, boot/vmlinuz-RELEASE and lib/modules.
build_vm_kernel7() {
	local rel=$VM_KERNEL7 version=$VM_KERNEL7_PKG_VERSION
	fetch_deb "$VM_KERNEL7_SUITE" "linux-binary-$rel" "$version" "$1" &&
		fetch_deb "$VM_KERNEL7_SUITE" "linux-base-$rel" "$version" "$1" &&
		fetch_deb "$VM_KERNEL7_SUITE" "linux-modules-$rel" "$version" "$1" || return 1
	if [ -d "$1/usr/lib/modules/$rel" ]; then
		mkdir -p "$1/lib" "$1/boot"
		mv "$1/usr/lib/modules" "$1/lib/modules"
	fi
	[ -f "$1/boot/vmlinuz-$rel" ] || mv "$1/lib/modules/$rel/vmlinuz" "$1/boot/vmlinuz-$rel" || return 1
	depmod -b "$1" "$rel"
}

build_vm_busybox() { # out
	unpack_deb "$VM_BUSYBOX_PACKAGE" "$1"
}

# vm_kernel prints the kernel package to boot: the pinned one, or, when the
# mirror no longer has it, the one bookworm-backports' linux-image-amd64 now
# depends on (remembered, so later runs agree without asking apt).
vm_kernel() {
	if [ -f "$(bindir vm-kernel "$VM_KERNEL_PACKAGE")/.complete" ]; then
		echo "$VM_KERNEL_PACKAGE"
	elif [ -s "$CACHE/bin/vm-kernel.fallback" ]; then
		cat "$CACHE/bin/vm-kernel.fallback"
	elif [ -n "$APT_UPDATED" ] && ! apt-cache show "$VM_KERNEL_PACKAGE" >/dev/null 2>&1; then
		local alt
		alt=$(apt-cache show linux-image-amd64/bookworm-backports 2>/dev/null | sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -n 1)
		[ -n "$alt" ] || die "kernel package $VM_KERNEL_PACKAGE is not on the mirror, and no linux-image-amd64 in bookworm-backports"
		log "warning: $VM_KERNEL_PACKAGE is no longer on the mirror; using $alt (pin it in test/vm/versions.env)"
		echo "$alt" >"$CACHE/bin/vm-kernel.fallback"
		echo "$alt"
	else
		echo "$VM_KERNEL_PACKAGE"
	fi
}

# --- The fastpathd image's PCI ID database (make image).

build_pci_ids() { # out
	unpack_deb "pci.ids=$PCI_IDS_VERSION" "$1"
	[ -f "$1/usr/share/misc/pci.ids" ] || { echo "pci.ids $PCI_IDS_VERSION has no usr/share/misc/pci.ids" >&2; return 1; }
}

image() {
	if [ ! -f "$(bindir pci-ids "$PCI_IDS_VERSION")/.complete" ] &&
		! apt-cache show "pci.ids=$PCI_IDS_VERSION" >/dev/null 2>&1; then
		apt_update_once
		apt-cache show "pci.ids=$PCI_IDS_VERSION" >/dev/null 2>&1 ||
			die "pci.ids $PCI_IDS_VERSION (test/images/versions.env) is not on this machine's apt mirror; apt-cache madison pci.ids lists what is"
	fi
	cached pci-ids "$PCI_IDS_VERSION" build_pci_ids
}

vm() {
	install_qemu
	command -v xz >/dev/null && command -v depmod >/dev/null && command -v curl >/dev/null ||
		{ APT_PACKAGES=(xz-utils kmod curl) && install_apt; }
	local busybox_key
	busybox_key=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")
	if [ ! -f "$(bindir vm-busybox "$busybox_key")/.complete" ]; then
		apt_update_once
	fi
	mkdir -p "$CACHE/bin"
	read -r VM_KERNEL7 VM_KERNEL7_PKG_VERSION <<<"$(vm_kernel7)"
	[ -n "$VM_KERNEL7" ] || die "no 7.x kernel for the VM"
	cached vm-kernel "$VM_KERNEL7" build_vm_kernel7
	cached vm-busybox "$busybox_key" build_vm_busybox
}

# vm_6_12 builds the kernel the VM booted before 7.x (Debian 12's), for a
# run on it: FASTPATH_VM_KERNEL=<the path it prints> make e2e-sriov.
vm_6_12() {
	if [ ! -f "$(bindir vm-kernel "$(vm_kernel)")/.complete" ]; then
		apt_update_once
	fi
	VM_KERNEL=$(vm_kernel)
	cached vm-kernel "$VM_KERNEL" build_vm_kernel
	bindir vm-kernel "$VM_KERNEL"
}

# env prints the directories of the cached builds as shell assignments, for the
# Makefile and the test bed.
env_vars() {
	cat <<VARS
FASTPATH_CACHE=$CACHE
FASTPATH_K8S_BIN=$(bindir kubernetes "$K8S_VERSION")
FASTPATH_ETCD_BIN=$(bindir etcd "$ETCD_VERSION")
FASTPATH_CONTAINERD_BIN=$(bindir containerd "$CONTAINERD_VERSION")
FASTPATH_RUNC_BIN=$(bindir runc "$RUNC_VERSION")
FASTPATH_CNI_BIN=$(bindir cni-plugins "$CNI_PLUGINS_VERSION")
FASTPATH_GOLANGCI_LINT=$(bindir golangci-lint "$GOLANGCI_LINT_VERSION")/golangci-lint
FASTPATH_VM_KERNEL=$(bindir vm-kernel "$(vm_kernel7 offline | cut -d' ' -f1)")
FASTPATH_VM_BUSYBOX=$(bindir vm-busybox "$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")")/bin/busybox
FASTPATH_HELM=$(bindir helm "$HELM_VERSION")/helm
FASTPATH_PROMTOOL=$(bindir promtool "$(promtool_version)")/usr/bin/promtool
FASTPATH_PROTOC_GEN=$(bindir protoc-gen "$(protobuf_version)-grpc-$PROTOC_GEN_GO_GRPC_VERSION")
FASTPATH_PCI_IDS=$(bindir pci-ids "$PCI_IDS_VERSION")/usr/share/misc/pci.ids
VARS
}

case "${1:-all}" in
all) install_apt "${TESTBED_APT_PACKAGES[@]}" "${VM_APT_PACKAGES[@]}"; proto; lint; testbed; image; vm ;;
apt) install_apt ;;
fast) install_apt; proto; lint; unit ;;
unit) install_apt; unit ;;
proto) install_apt; proto ;;
lint) lint ;;
testbed) install_apt "${TESTBED_APT_PACKAGES[@]}"; testbed ;;
image) image ;;
vm) install_apt "${TESTBED_APT_PACKAGES[@]}" "${VM_APT_PACKAGES[@]}"; vm ;;
vm-6.12) vm_6_12 ;;
env) env_vars ;;
*) echo "usage: $0 [all|apt|fast|unit|lint|proto|testbed|image|vm|vm-6.12|env]" >&2; exit 2 ;;
esac
