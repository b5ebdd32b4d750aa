#!/usr/bin/env bash
# Runs every fuzz target of the given packages for FUZZTIME each.
#
# Each package's test binary is built once, instrumented for fuzzing as
# go test -fuzz builds it, and run from the package's directory for each of
# its targets (as go test runs it: the seeds in testdata/fuzz, the corpus it
# grows in the build cache's fuzz directory). go test -fuzz would link the
# binary again for every target, which takes longer than 4 s of fuzzing.
#
# Go's fuzzing engine can fail a run with a bare "context deadline exceeded"
# when the time is up while a worker is still busy (slow with binaries as
# large as ours); no input failed then, and no crasher is written. Such a run
# is repeated (twice at most); any other failure, or a crasher, fails at once.
set -euo pipefail
go=${GO:-go}
fuzztime=${FUZZTIME:-10s}
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
cache=$("$go" env GOCACHE)/fuzz
# The executions of each target, printed at the end: a target well below
# 10,000 in the default 10s explores little (a large test binary's coverage
# counters cost every execution; see docs/development.md#fuzzing).
summary=()
for pkg in "$@"; do
	dir=$("$go" list -f '{{.Dir}}' "$pkg")
	importpath=$("$go" list -f '{{.ImportPath}}' "$pkg")
	# Only where a test file declares a fuzz target.
	if ! grep -qs '^func Fuzz' "$dir"/*_test.go; then
		continue
	fi
	bin="$bins/$(echo "$importpath" | tr / _).test"
	"$go" test -c -fuzz=. -o "$bin" "$pkg"
	for target in $(cd "$dir" && "$bin" -test.list '^Fuzz' | grep '^Fuzz' || true); do
		echo "fuzz $pkg $target"
		corpus="$dir/testdata/fuzz/$target"
		for attempt in 1 2 3; do
			# A failing input is written to the corpus directory, which may
			# hold committed seeds: a new file there is a crasher.
			before=$(ls "$corpus" 2>/dev/null || true)
			# Minimizing an interesting input is not counted in the run's
			# executions, and within seconds of fuzzing it would take most
			# of them: ten executions at most.
			if out=$(cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${target}\$" -test.fuzztime "$fuzztime" \
				-test.fuzzminimizetime 10x -test.fuzzcachedir "$cache/$importpath" -test.timeout 10m -test.paniconexit0 2>&1); then
				# The run's executions, then its verdict.
				execs=$(echo "$out" | grep 'execs:' | tail -n 1 || true)
				echo "$execs"
				echo "$out" | tail -n 1
				execs=$(echo "$execs" | sed -n 's/.*execs: \([0-9]*\).*/\1/p')
				summary+=("$(printf '%-24s %10s' "$target" "${execs:-unreported}")")
				break
			fi
			if [ "$attempt" -lt 3 ] && [ "$(ls "$corpus" 2>/dev/null || true)" = "$before" ] &&
				echo "$out" | grep -q -- "--- FAIL: $target" && echo "$out" | grep -qx '    context deadline exceeded'; then
				echo "fuzz engine timed out without a failing input; once more"
				continue
			fi
			echo "$out"
			exit 1
		done
	done
done
echo "executions in $fuzztime:"
printf '  %s\n' "${summary[@]}"
