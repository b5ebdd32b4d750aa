#!/usr/bin/env bash
# Runs the core e2e cases (MATRIX_E2E) on a test bed of each cell of the
# platform matrix: a Kubernetes version and a containerd version, each
# built from the Go module proxy and cached by version (test/deps.sh, with
# FASTPATH_K8S_VERSION and FASTPATH_CONTAINERD_VERSION). Each cell gets a
# bed of its own, stopped after it (any bed running before is stopped
# first). Prints each cell's versions, result and time, and a table at
# the end; fails if a cell fails.
#
#   MATRIX_CELLS   "K8S/CONTAINERD ..." (default: the cells below)
#   MATRIX_E2E     the go test -run pattern of the core cases
set -uo pipefail
go=${GO:-go}
cd "$(dirname "$0")/.."
cells=${MATRIX_CELLS:-"v1.34.4/v2.2.9 v1.35.4/v2.2.9 v1.36.3/v2.2.9 v1.37.2/v2.2.9 v1.37.2/v2.0.7 v1.37.2/v1.7.32"}
run=${MATRIX_E2E:?MATRIX_E2E is the go test -run pattern}
results=()
failed=0
for cell in $cells; do
	k8s=${cell%/*} ctrd=${cell#*/}
	echo "=== cell: Kubernetes $k8s, containerd $ctrd"
	start=$SECONDS
	export FASTPATH_K8S_VERSION=$k8s FASTPATH_CONTAINERD_VERSION=$ctrd FASTPATH_RUNTIME=containerd
	result=pass
	if ! test/deps.sh testbed; then
		result="FAIL (build)"
	else
		"$go" run ./test/testbed/cmd/testbed down >/dev/null
		if ! "$go" test -count=1 -timeout 30m -tags e2e -run "^($run)\$" -v ./test/e2e/...; then
			result=FAIL
		fi
		"$go" run ./test/testbed/cmd/testbed down >/dev/null
	fi
	[ "$result" = pass ] || failed=1
	secs=$((SECONDS - start))
	echo "=== cell: Kubernetes $k8s, containerd $ctrd: $result in ${secs}s"
	results+=("$(printf '%-10s %-10s %-14s %5d s' "$k8s" "$ctrd" "$result" "$secs")")
done
echo "e2e-matrix: the core cases ($run) per cell:"
printf '  %-10s %-10s %-14s %7s\n' Kubernetes containerd result time
for r in "${results[@]}"; do echo "  $r"; done
exit $failed
