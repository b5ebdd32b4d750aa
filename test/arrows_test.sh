#!/usr/bin/env bash
# arrows_test.sh tests test/arrows.sh without touching the tree: a go list
# overlay adds a file to package dataplane that imports dra/claims, and the
# check must fail and name the rule it breaks; without the overlay that rule
# holds. Then a rule naming a package that does not exist must fail, unless
# ARROWS_ALLOW_MISSING=1. Run by make lint.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd)
arrows=$repo/test/arrows.sh
M=github.com/fastpath-dra/fastpath
RULE=dataplane-below-dra

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
fail() { echo "arrows_test: FAIL: $*" >&2; failed=1; }

# run NAME ARGS...: runs arrows.sh, its output in $tmp/NAME.out and its exit
# status in $rc.
run() {
	local name=$1
	shift
	rc=0
	env -u ARROWS_ALLOW_MISSING -u ARROWS_OVERLAY "$@" >"$tmp/$name.out" 2>&1 || rc=$?
}
expect() { # NAME WANT_RC [GREP_PATTERN]...
	local name=$1 want=$2 pat
	shift 2
	if [ "$rc" -ne "$want" ]; then
		fail "$name: exit status $rc, want $want"
		sed 's/^/    /' "$tmp/$name.out" >&2
	fi
	for pat in "$@"; do
		grep -qF -- "$pat" "$tmp/$name.out" || { fail "$name: output lacks \"$pat\""; sed 's/^/    /' "$tmp/$name.out" >&2; }
	done
}

# 1. The rule holds on the tree as it is.
run clean "$arrows" -rule "$RULE"
expect clean 0 "arrows: ok ($RULE)"

# 2. A file added to package dataplane that imports dra/claims breaks it.
cat >"$tmp/zz_arrow_test_wrong.go" <<'GO'
package dataplane

import _ "github.com/fastpath-dra/fastpath/dra/claims"
GO
printf '{"Replace": {"%s": "%s"}}\n' "$repo/dataplane/zz_arrow_test_wrong.go" "$tmp/zz_arrow_test_wrong.go" >"$tmp/overlay.json"
run wrong "$arrows" -overlay "$tmp/overlay.json" -rule "$RULE"
expect wrong 1 "FAIL rule $RULE: $M/dataplane imports $M/dra/claims" \
	"via $M/dataplane -> $M/dra/claims"
# The same through the environment, and with every rule: still named.
run wrong-env env ARROWS_OVERLAY="$tmp/overlay.json" "$arrows"
expect wrong-env 1 "FAIL rule $RULE: $M/dataplane imports $M/dra/claims"

# A file only the faultinject build has is checked too.
{ printf '//go:build faultinject\n\n'; cat "$tmp/zz_arrow_test_wrong.go"; } >"$tmp/zz_arrow_test_tagged.go"
printf '{"Replace": {"%s": "%s"}}\n' "$repo/dataplane/fault/zz_arrow_test_tagged.go" "$tmp/zz_arrow_test_tagged.go" >"$tmp/overlay-tagged.json"
sed -i 's/^package dataplane$/package fault/' "$tmp/zz_arrow_test_tagged.go"
run tagged "$arrows" -overlay "$tmp/overlay-tagged.json" -rule "$RULE"
expect tagged 1 "FAIL rule $RULE (tags faultinject): $M/dataplane/fault imports $M/dra/claims"

# 3. A rule whose package does not exist fails; ARROWS_ALLOW_MISSING=1 only
# warns. Likewise a pattern that matches nothing.
printf 'ghost | %s/no/such/package | fmt | test\nghosts | %s/no/such/... | fmt | test\n' "$M" "$M" >"$tmp/table"
run missing "$arrows" -table "$tmp/table"
expect missing 1 "FAIL rule ghost: $M/no/such/package does not exist" \
	"FAIL rule ghosts: $M/no/such/...: matches no package"
run missing-allowed env ARROWS_ALLOW_MISSING=1 "$arrows" -table "$tmp/table"
expect missing-allowed 0 "warning: rule ghost:" "warning: rule ghosts:"

# 4. A rule of the table that is there, found (make lint's rule names in
# this test must not rot), and one that is not is a usage error.
run unknown "$arrows" -rule no-such-rule
expect unknown 2 "no rule named no-such-rule"

if [ "$failed" -ne 0 ]; then
	exit 1
fi
echo "arrows_test: ok"
