#!/usr/bin/env bash
# arrows.sh checks the import arrows between fastpath's packages: which
# packages must never reach which, directly or through any chain of imports
# (go list -deps). Run by make lint; test/arrows_test.sh tests it.
#
#   test/arrows.sh [-overlay FILE] [-rule NAME]... [-table FILE]
#
#   -overlay FILE  go list -overlay FILE (also ARROWS_OVERLAY=FILE): check the
#                  tree as if edited, without touching it
#   -rule NAME     check only this rule (repeatable); an unknown name is an error
#   -table FILE    read the rules from FILE instead of the table below
#
# A rule whose package does not exist (or matches nothing) fails the check, so
# that a rename cannot quietly switch a rule off; ARROWS_ALLOW_MISSING=1 makes
# that a warning, for work in progress only (make lint never sets it).
# Exit status: 0 all arrows hold, 1 a rule is broken or its package missing,
# 2 usage, or go list failed.
set -euo pipefail

M=github.com/fastpath-dra/fastpath

# The rules, one a line: name | packages (go list patterns) | forbidden
# imports (an import path, or path/... for it and every package below it) |
# why, printed with a violation. Add a line to add a rule.
RULES_TABLE="
kubelet-no-nri      | $M/dra $M/dra/cnidriver $M/dra/kubelet | $M/dra/nri/... | the kubelet drivers run without the NRI plugin
controller-no-node  | $M/controller | github.com/vishvananda/netlink/... github.com/vishvananda/netns/... github.com/cilium/ebpf/... github.com/containerd/nri/... $M/dra/nri/... k8s.io/dynamic-resource-allocation/kubeletplugin/... $M/dataplane/... $M/bpf/... | the controller runs off the node: no netlink, eBPF, NRI, kubelet plugin or data plane
cnipolicy-pure      | $M/dra/cnipolicy | k8s.io/dynamic-resource-allocation/kubeletplugin/... github.com/vishvananda/netlink/... github.com/vishvananda/netns/... k8s.io/client-go/... | the CNI policy is pure: no kubelet plugin, netlink or API client
api-lean            | $M/dra/api/... | k8s.io/dynamic-resource-allocation/kubeletplugin/... github.com/vishvananda/netlink/... github.com/cilium/ebpf/... github.com/containerd/nri/... | the config API is imported by clients and the controller
dataplane-below-dra | $M/dataplane/... | $M/dra/... | the data plane is below the driver
devices-below-dra   | $M/devices/... | $M/dra/... | device discovery is below the driver
checks-without-cel  | $M/devices $M/dra/claimspec $M/dra/validate $M/dra/cnipolicy $M/dra/npwg | k8s.io/dynamic-resource-allocation/cel github.com/google/cel-go/... | the CEL interpreter is fastpathd's (devices/filter): the checks of configs and manifests stay small, and their fuzz targets fast
"

# Each rule holds under each of these build tag sets ("" is none; faultinject
# is the e2e image's fastpathd). The rules are about a Linux build.
TAGSETS=("" faultinject)
export GOOS=linux

GO=${GO:-go}
OVERLAY=${ARROWS_OVERLAY:-}
ONLY=()
TABLE_FILE=
usage() { echo "usage: $0 [-overlay FILE] [-rule NAME]... [-table FILE]" >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	-overlay | --overlay) [ $# -ge 2 ] || usage; OVERLAY=$2; shift 2 ;;
	-rule | --rule) [ $# -ge 2 ] || usage; ONLY+=("$2"); shift 2 ;;
	-table | --table) [ $# -ge 2 ] || usage; TABLE_FILE=$2; shift 2 ;;
	*) usage ;;
	esac
done
if [ -n "$TABLE_FILE" ]; then
	RULES_TABLE=$(<"$TABLE_FILE")
fi
if [ -n "$OVERLAY" ] && [ ! -f "$OVERLAY" ]; then
	echo "arrows: overlay $OVERLAY: no such file" >&2
	exit 2
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The table as name<TAB>packages<TAB>forbidden<TAB>why, trimmed, and the rules
# chosen with -rule.
rules=$(awk -F'|' -v only="${ONLY[*]:-}" '
	function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); gsub(/[ \t]+/, " ", s); return s }
	BEGIN { n = split(only, o, " "); for (i = 1; i <= n; i++) want[o[i]] = 1 }
	/^[ \t]*(#|$)/ { next }
	NF < 3 { print "arrows: bad rule line: " $0 > "/dev/stderr"; bad = 1; next }
	{ name = trim($1); seen[name] = 1 }
	n == 0 || want[name] { print name "\t" trim($2) "\t" trim($3) "\t" trim($4) }
	END {
		for (w in want) if (!seen[w]) { print "arrows: no rule named " w > "/dev/stderr"; bad = 1 }
		exit bad ? 2 : 0
	}' <<<"$RULES_TABLE") || exit 2
[ -n "$rules" ] || { echo "arrows: no rules" >&2; exit 2; }

# Every package pattern of the chosen rules, for one go list call per tag set.
read -r -a patterns <<<"$(cut -f2 <<<"$rules" | tr '\n' ' ')"

# What was reported under an earlier tag set, not to be said again (it still
# fails the check).
said=$(mktemp)
trap 'rm -f "$said"' EXIT
status=0
for tags in "${TAGSETS[@]}"; do
	args=(list -e -deps -f '{{.ImportPath}}	{{join .Match " "}}	{{with .Error}}{{printf "%q" .Err}}{{end}}	{{join .Imports " "}}	{{if .Match}}{{join .Deps " "}}{{end}}')
	[ -n "$tags" ] && args+=(-tags "$tags")
	[ -n "$OVERLAY" ] && args+=(-overlay "$OVERLAY")
	errf=$(mktemp)
	if ! graph=$("$GO" "${args[@]}" "${patterns[@]}" 2>"$errf"); then
		cat "$errf" >&2
		rm -f "$errf"
		echo "arrows: go list failed" >&2
		exit 2
	fi
	# go list warns on stderr of a pattern that matches no package; the
	# awk below finds those itself.
	grep -v 'matched no packages' "$errf" >&2 || true
	rm -f "$errf"

	# The graph on stdin (path, patterns it matched, error, imports), the
	# rules in RULES. For each package a rule's patterns match: its
	# closure, and each forbidden package in it that a package not itself
	# forbidden imports directly: the arrow that breaks the rule, with the
	# shortest chain from the package to it.
	rc=0
	RULES=$rules awk -F'\t' -v tags="$tags" -v allow_missing="${ARROWS_ALLOW_MISSING:-}" -v said="$said" -v module="$M" '
		function forbidden(p, pats,   n, i, f, a) {
			n = split(pats, a, " ")
			for (i = 1; i <= n; i++) {
				f = a[i]
				if (f ~ /\/\.\.\.$/) {
					f = substr(f, 1, length(f) - 4)
					if (p == f || index(p, f "/") == 1) return 1
				} else if (p == f) return 1
			}
			return 0
		}
		function chain(root, p,   s) {
			s = p
			while (p != root) { p = parent[p]; s = p " -> " s }
			return s
		}
		function firstline(e) {
			sub(/^"/, "", e); sub(/"$/, "", e); sub(/\\n.*/, "", e); sub(/[;:] *(to add it:)?$/, "", e)
			return e
		}
		function few(list,   n, a, i, s, m, c) { # five of list, the project packages first
			n = split(list, a, " "); s = ""; c = 0
			for (m = 1; m >= 0; m--)
				for (i = 1; i <= n; i++)
					if ((index(a[i], module "/") == 1) == m && c < 5) { s = s " " a[i]; c++ }
			return n > c ? s " (and " n - c " more)" : s
		}
		function new(key) { # whether key was not reported yet
			if (key in done) return 0
			done[key] = 1; print key >>said
			return 1
		}
		function missing_err(e) {
			return e ~ /no required module provides|cannot find (module|package)|no Go files|no non-test Go files|is not in std|directory not found|does not contain package/
		}
		BEGIN { while ((getline k <said) > 0) done[k] = 1; close(said) }
		{
			node[$1] = 1; err[$1] = $3; imports[$1] = $4; deps[$1] = $5
			nm = split($2, ms, " ")
			for (i = 1; i <= nm; i++) roots[ms[i]] = roots[ms[i]] " " $1
			if ($3 != "" && nm == 0) deperr[$1] = $3
		}
		END {
			label = tags == "" ? "" : " (tags " tags ")"
			for (p in deperr) { printf "arrows: go list%s: %s: %s\n", label, p, deperr[p] > "/dev/stderr"; hard = 1 }
			nr = split(ENVIRON["RULES"], lines, "\n")
			for (r = 1; r <= nr; r++) {
				split(lines[r], f, "\t"); name = f[1]; forb = f[3]; why = f[4]
				np = split(f[2], pats, " ")
				for (k = 1; k <= np; k++) {
					pat = pats[k]; bad_pkg = ""
					if (roots[pat] == "") bad_pkg = pat ": matches no package"
					nroot = split(roots[pat], rs, " ")
					for (j = 1; j <= nroot && bad_pkg == ""; j++)
						if (err[rs[j]] != "" && missing_err(err[rs[j]])) bad_pkg = rs[j] " does not exist (" firstline(err[rs[j]]) ")"
					if (bad_pkg != "") {
						if (allow_missing == "1") {
							if (new("missing " name " " pat))
								printf "arrows: warning: rule %s%s: %s (ARROWS_ALLOW_MISSING=1)\n", name, label, bad_pkg > "/dev/stderr"
						} else {
							if (new("missing " name " " pat))
								printf "arrows: FAIL rule %s%s: %s; a rule must name packages that exist (rename the rule with the package)\n", name, label, bad_pkg
							fail = 1
						}
						continue
					}
					for (j = 1; j <= nroot; j++) {
						root = rs[j]
						if (err[root] != "") { printf "arrows: go list%s: %s: %s\n", label, root, err[root] > "/dev/stderr"; hard = 1; continue }
						# Breadth first: parent[] gives shortest chains.
						delete parent; delete seen; delete entry; delete others; ne = 0
						q[1] = root; seen[root] = 1; head = 1; tail = 1
						while (head <= tail) {
							u = q[head++]
							ni = split(imports[u], im, " ")
							uf = forbidden(u, forb)
							for (i = 1; i <= ni; i++) {
								v = im[i]
								if (!(v in node)) continue # "C"
								if (!(v in seen)) { seen[v] = 1; parent[v] = u; q[++tail] = v }
								if (!uf && forbidden(v, forb)) {
									if (!(v in entry)) { entry[v] = u; order[++ne] = v }
									else others[v] = others[v] " " u
								}
							}
						}
						# .Deps has what .Imports leaves out (runtime/cgo
						# of cgo packages): the count, and a check.
						nd = split(deps[root], ds, " ")
						for (i = 1; i <= nd; i++)
							if (forbidden(ds[i], forb) && !(ds[i] in seen)) { entry[ds[i]] = "?"; order[++ne] = ds[i] }
						if (tags == "" && !(root in counted)) {
							counted[root] = 1
							printf "arrows: %s: %d packages in go list -deps (rule %s)\n", root, nd + 1, name
						}
						for (i = 1; i <= ne; i++) {
							v = order[i]; fail = 1
							if (!new("arrow " name " " root " " v)) continue
							printf "arrows: FAIL rule %s%s: %s imports %s (%s)\n", name, label, root, v, why
							if (entry[v] != "?") printf "    via %s\n", chain(root, entry[v]) " -> " v
							if (others[v] != "") printf "    also imported by:%s\n", few(others[v])
							fail = 1
						}
					}
				}
			}
			exit hard ? 2 : fail ? 1 : 0
		}' <<<"$graph" || rc=$?
	if [ "$rc" -gt "$status" ]; then status=$rc; fi
done

if [ "$status" -eq 0 ]; then
	echo "arrows: ok ($(cut -f1 <<<"$rules" | tr '\n' ' ' | sed 's/ $//'))"
fi
exit "$status"
