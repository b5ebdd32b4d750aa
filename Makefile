# fastpath: see README.md. `make` alone lists the targets.

SHELL := /bin/bash
GO ?= go
# Every go command of the targets builds with -trimpath: a build then does
# not depend on the tree's directory, and a fresh clone elsewhere finds its
# packages in the build cache (tests find their files from their working
# directory, never from their sources' paths).
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := bin
DEPS := test/deps.sh
DEPS_ENV = eval "$$($(DEPS) env)"
# Every package but the end-to-end suite and the benchmarks.
PKGS = $(shell $(GO) list ./... | grep -v -e /test/e2e -e /bench)
E2E_TIMEOUT ?= 45m
# E2E_GOFLAGS are more go test flags of make e2e, such as -race: the suite's
# own code is then checked for races too, at a fifth more of its time (the
# daemon it tests runs in its image, never built with -race; the unit and
# privileged tests run fastpath's code with -race).
E2E_GOFLAGS ?=
CHART := deploy/helm/fastpath
# The Kubernetes version the chart is rendered for offline: the test bed's.
KUBE_VERSION := $(shell sed -n 's/^K8S_VERSION=v//p' test/testbed/versions.env)
IMAGE ?= fastpath.local/fastpathd:$(VERSION)
# GO_TAGS are build tags of bin/fastpathd: the e2e suite's image has
# faultinject, whose fault points do nothing unless armed.
GO_TAGS ?=
IMAGE_ARCHIVE ?= $(BIN)/fastpathd-image.tar
# IMAGE_ARCHES are the fastpathd image's platforms (linux/ARCH): a static
# fastpathd each, bin/linux-ARCH/fastpathd, and a manifest each in the
# image's index.
IMAGE_ARCHES := amd64 arm64
# The image's PCI ID database is Debian's pci.ids package at
# PCI_IDS_VERSION (test/images/versions.env), which test/deps.sh image
# fetches into the cache. PCI_IDS=FILE takes another file instead, and the
# image then records no version of it.
PCI_IDS_VERSION := $(shell sed -n 's/^PCI_IDS_VERSION=//p' test/images/versions.env)
PCI_IDS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install Debian packages and build the test bed's components (cached in ~/.cache/fastpath)
	$(DEPS) all

.PHONY: build
build: ## build bin/fastpathd (static)
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GO_TAGS)' -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN)/fastpathd ./cmd/fastpathd

.PHONY: image
image: ## write the fastpathd image, an index of linux/amd64 and linux/arm64, as an OCI archive, bin/fastpathd-image.tar (IMAGE names it)
	for arch in $(IMAGE_ARCHES); do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -tags '$(GO_TAGS)' -ldflags "-s -w -X main.version=$(VERSION)" \
			-o $(BIN)/linux-$$arch/fastpathd ./cmd/fastpathd || exit 1; done
	$(if $(PCI_IDS),,$(DEPS) image)
	$(DEPS_ENV); SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./test/images/build \
		$(foreach arch,$(IMAGE_ARCHES),-binary $(BIN)/linux-$(arch)/fastpathd) \
		$(if $(PCI_IDS),-pci-ids '$(PCI_IDS)',-pci-ids "$$FASTPATH_PCI_IDS" -pci-ids-version '$(PCI_IDS_VERSION)') \
		-tag $(IMAGE) -version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" -o $(IMAGE_ARCHIVE)

.PHONY: image-reproducible
image-reproducible: ## build the image from two fresh clones of HEAD in different directories; fail unless both are byte for byte the same (the index and every platform's image)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && for c in a b; do \
		git clone -q --shared "$$(git rev-parse --show-toplevel)" "$$tmp/$$c-$$RANDOM" && \
		dir=$$(ls -d "$$tmp/$$c"-*) && git -C "$$dir" checkout -q --detach "$$(git rev-parse HEAD)" && \
		$(MAKE) --no-print-directory -s -C "$$dir" image IMAGE_ARCHIVE="$$tmp/$$c.tar" >"$$tmp/$$c.log" 2>&1 || \
		{ cat "$$tmp/$$c.log"; exit 1; }; grep -F "$$tmp/$$c.tar: " "$$tmp/$$c.log"; done && \
		cmp "$$tmp/a.tar" "$$tmp/b.tar" && \
		echo "reproducible: two builds of $$(git rev-parse --short HEAD) give the same image:" \
			"$$(sed -n "s|^$$tmp/a.tar: .* index \(sha256:[0-9a-f]*\).*|index \1|p; s|^$$tmp/a.tar: \([^ ]*\) manifest \(sha256:[0-9a-f]*\).*|\1 \2|p" "$$tmp/a.log" | paste -sd ' ')"

# render_manifests DIR renders the plain manifests of deploy/ from the chart
# into DIR: the DeviceClasses, for kubectl apply without Helm.
define render_manifests
	$(DEPS_ENV); render() { \
		printf '# Rendered from $(CHART) (%s) by make manifests: edit the chart, not this file.\n' "$$1"; \
		"$$FASTPATH_HELM" template fastpath $(CHART) --kube-version $(KUBE_VERSION) --show-only "templates/$$1" "$${@:2}" \
			| sed -e '/^# Source: /d' | sed -e '1{/^---$$/d}'; }; \
	render deviceclasses.yaml >$(1)/deviceclasses.yaml && \
	render cni-deviceclass.yaml --set cni.enabled=true >$(1)/cni-deviceclass.yaml
endef

.PHONY: manifests
manifests: ## render the plain manifests of deploy/ (DeviceClasses) from the Helm chart
	$(DEPS) lint
	$(call render_manifests,deploy)

.PHONY: chart-lint
chart-lint: ## helm lint and render the chart with its defaults and with every value set; deploy/ must be what it renders; promtool checks the alert rules and fires each (files/alerts_test.yaml)
	$(DEPS) lint
	$(DEPS_ENV); for values in "" "--values $(CHART)/ci/all-values.yaml"; do \
		"$$FASTPATH_HELM" lint --strict $(CHART) --kube-version $(KUBE_VERSION) $$values && \
		"$$FASTPATH_HELM" template fastpath $(CHART) --kube-version $(KUBE_VERSION) $$values >/dev/null || exit 1; done
	@# The alert rules: as a PrometheusRule too, checked, and each alert
	@# fired and cleared (files/alerts_test.yaml).
	$(DEPS_ENV); "$$FASTPATH_HELM" template fastpath $(CHART) --kube-version $(KUBE_VERSION) --values $(CHART)/ci/all-values.yaml 		--api-versions monitoring.coreos.com/v1/PrometheusRule | grep -q '^kind: PrometheusRule' && 		"$$FASTPATH_PROMTOOL" check rules $(CHART)/files/alerts.yaml && 		cd $(CHART)/files && "$$FASTPATH_PROMTOOL" test rules alerts_test.yaml
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(call render_manifests,$$tmp) && \
		for f in deviceclasses.yaml cni-deviceclass.yaml; do \
			diff -u deploy/$$f $$tmp/$$f || { echo "deploy/$$f differs from what the chart renders: run make manifests and commit" >&2; exit 1; }; done

.PHONY: generate
generate: ## regenerate generated code (installs clang, libbpf headers, protoc and its Go plugins when missing)
	$(DEPS) proto
	set -a && $(DEPS_ENV) && set +a && $(GO) generate ./...

.PHONY: generated
generated: ## regenerate, and fail if anything generated differs from what is committed
	$(DEPS) proto
	set -a && $(DEPS_ENV) && set +a && $(GO) generate ./...
	$(MAKE) --no-print-directory manifests
	@if [ -n "$$(git status --porcelain -- bpf devices/testdata deploy dra/netapi)" ]; then \
		git status --short -- bpf devices/testdata deploy dra/netapi >&2; \
		echo "generated files differ from what is committed: run make generate and commit" >&2; exit 1; fi

.PHONY: arrows
arrows: ## the import arrows between packages (the table in test/arrows.sh), after testing the check itself (test/arrows_test.sh)
	GO=$(GO) test/arrows_test.sh
	GO=$(GO) test/arrows.sh

.PHONY: lint
# go vet runs within golangci-lint (its govet, go vet's analyzers, with
# every build tag of .golangci.yml): a go vet of its own would type-check
# every package a second time.
lint: chart-lint arrows ## go vet and more (golangci-lint, every build tag), go mod tidy, gofmt, the import arrows (arrows), fastpathd validate over deploy/, and the Helm chart (chart-lint)
	$(DEPS) lint
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum are not tidy: run go mod tidy" >&2; $(GO) mod tidy -diff; exit 1; }
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(DEPS_ENV); "$$FASTPATH_GOLANGCI_LINT" run ./...
	@# The examples' nodes also run sriov-cni (deploy/examples/delegate.yaml).
	$(GO) run ./cmd/fastpathd validate --strict -f deploy/examples -f deploy/deviceclasses.yaml -f deploy/cni-deviceclass.yaml \
		--cni-plugins=bridge,host-local,ipvlan,macvlan,static,tuning,vlan,sriov

.PHONY: faults
faults: ## kill the daemon at every fault point of a claim's life, restart it and replay every recovery order; FAULT_ORDERS=N replays N orders per point, drawn from a seed it prints (make test: 2) (root)
	$(DEPS) testbed
	set -o pipefail; $(DEPS_ENV); export FASTPATH_CNI_BIN; FASTPATH_FAULT_ORDERS=$(FAULT_ORDERS) $(GO) test -count=1 -timeout 20m -tags privileged,faultinject -run '^(TestFaults|TestFaultAdmin)$$' -v ./dra/ | \
		grep -v -e '^=== RUN' -e '^ *--- PASS' -e '^=== NAME' -e '^=== PAUSE' -e '^=== CONT'

.PHONY: unit
unit: ## unit tests without root (discovery needs the pci.ids package: test/deps.sh apt, which make fast and make deps run)
	$(GO) test -race -count=1 $(PKGS)

.PHONY: privileged
privileged: ## unit and privileged tests (root: netns, veth, BPF)
	$(DEPS) unit
	$(GO) test -race -count=1 -tags privileged $(PKGS)

FUZZTIME ?= 10s

# make test fuzzes each target briefly (the warm run's budget; its recipe
# hands FUZZTIME to make fuzz); make fuzz alone, or with FUZZTIME=10m, for
# longer.
test: FUZZTIME = 3s
test: FAULT_ORDERS = 2

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 10s; 3s within make test) each
	GO=$(GO) FUZZTIME=$(FUZZTIME) test/fuzz.sh $(PKGS)

# RUNTIME is the bed's container runtime: containerd, or crio (CRI-O).
RUNTIME ?= containerd
export FASTPATH_RUNTIME = $(RUNTIME)

.PHONY: e2e
e2e: ## end-to-end tests on a real single-node Kubernetes (root; uses a running bed or starts its own; RUNTIME=crio on a CRI-O node)
	$(DEPS) testbed
	$(GO) test $(E2E_GOFLAGS) -count=1 -timeout $(E2E_TIMEOUT) -tags e2e -v ./test/e2e/...

# CRIO_E2E are the e2e cases e2e-crio runs on a CRI-O node: a netdev, a
# vfio stand-in, a shared sub-interface, CNI claims, NPWG networks, a kill
# -9 during RunPodSandbox, a rolling upgrade with pods starting,
# required-plugins (not enforced by CRI-O 1.34: the network comes when
# fastpathd connects).
CRIO_E2E = TestDataplaneNetdev|TestVFIO|TestSharedNIC|TestCNI|TestNPWG|TestFaultKillInSandbox|TestRollingUpgrade|TestRequiredPlugins

# MATRIX_E2E are the e2e cases e2e-matrix runs in each cell: a netdev
# claim and its status, a vfio stand-in, a shared sub-interface, CNI
# claims, NPWG networks, a kill -9 mid-start, a rolling upgrade with pods
# running, device metadata where the version has it, required-plugins
# (enforced from containerd 2.2; before, the node's condition says so).
MATRIX_E2E = TestDataplaneNetdev|TestVFIO|TestSharedNIC|TestCNI|TestNPWG|TestFaultKillInSandbox|TestRollingUpgrade|TestDeviceMetadata|TestRequiredPlugins

# OLDEST_CELL and OLDEST_E2E are the matrix's oldest cell and the cases
# make test runs on it (e2e-oldest): a netdev claim, a shared
# sub-interface without consumable capacity (the node's condition saying
# so), required-plugins.
OLDEST_CELL = v1.34.4/v2.2.9
OLDEST_E2E = TestDataplaneNetdev|TestSharedNIC|TestRequiredPlugins

.PHONY: e2e-oldest
e2e-oldest: ## some core e2e cases (OLDEST_E2E) on the matrix's oldest cell (OLDEST_CELL: Kubernetes 1.34 with containerd 2.2), a bed of its own; in make test (root)
	GO=$(GO) MATRIX_CELLS='$(OLDEST_CELL)' MATRIX_E2E='$(OLDEST_E2E)' test/matrix.sh

.PHONY: e2e-matrix
e2e-matrix: ## the core e2e cases (MATRIX_E2E) on each cell of the platform matrix, Kubernetes 1.34 to 1.37 with containerd 2.2 and 1.37 with containerd 2.0 and 1.7, a bed of its own each; MATRIX_CELLS="v1.34.4/v2.2.9 ..." for some (root)
	GO=$(GO) MATRIX_E2E='$(MATRIX_E2E)' test/matrix.sh

.PHONY: e2e-crio
e2e-crio: ## the core e2e cases (CRIO_E2E) on a CRI-O node: a bed of its own, started and stopped (root)
	$(DEPS) testbed
	$(GO) run ./test/testbed/cmd/testbed down
	FASTPATH_RUNTIME=crio $(GO) test $(E2E_GOFLAGS) -count=1 -timeout $(E2E_TIMEOUT) -tags e2e -run '^($(CRIO_E2E))$$' -v ./test/e2e/...
	$(GO) run ./test/testbed/cmd/testbed down

.PHONY: newcomer
newcomer: ## the README's commands in a newcomer's order on one bed: make demo, the e2e suite with the demo's bed up, make demo again; then the bed down and nothing of it left (root)
	$(MAKE) --no-print-directory demo
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory demo
	$(MAKE) --no-print-directory cluster-down
	$(GO) run ./test/testbed/cmd/testbed leftovers

CHURN_CYCLES ?= 20

.PHONY: churn
churn: ## churn under faults on the real node: CHURN_CYCLES (20) cycles of 8 pods with claims while fastpathd, the kubelet and containerd are killed at random moments (root; FASTPATH_CHURN_SEED=<seed> replays a run)
	$(DEPS) testbed
	FASTPATH_CHURN_CYCLES=$(CHURN_CYCLES) $(GO) test -count=1 -timeout 120m -tags e2e -run '^TestChurn$$' -v ./test/e2e/

OUTAGE ?= 90s

.PHONY: outage
outage: ## the API server down for OUTAGE (90s) while pods with prepared claims start and stop; make e2e runs it for 15 s (root)
	$(DEPS) testbed
	FASTPATH_OUTAGE=$(OUTAGE) $(GO) test -count=1 -timeout 30m -tags e2e -run '^TestOutageAPIServer$$' -v ./test/e2e/

UPGRADE_CYCLES ?= 10

.PHONY: upgrade-churn
upgrade-churn: ## rolling upgrades under churn on the real node: UPGRADE_CYCLES (10) helm upgrades to a new image while pods with netdev, vfio, CNI and NPWG claims come and go and the old or the new daemon is killed at a random moment (root; FASTPATH_UPGRADE_SEED=<seed> replays a run)
	$(DEPS) testbed
	FASTPATH_UPGRADE_CYCLES=$(UPGRADE_CYCLES) $(GO) test -count=1 -timeout 120m -tags e2e -run '^TestUpgradeChurn$$' -v ./test/e2e/

SCALE_NODES ?= 100

.PHONY: scale
scale: ## a larger cluster simulated against the bed's API server: SCALE_NODES (100) nodes of 1,024 VFs published by fastpathd's publisher, claims scheduled among them, 5,000 gated pods and 500 PodNetworks reconciled; make e2e runs it with 5 nodes (root)
	$(DEPS) testbed
	FASTPATH_SCALE_NODES=$(SCALE_NODES) FASTPATH_SCALE_PODS=200 FASTPATH_SCALE_GATED_PODS=5000 FASTPATH_SCALE_PODNETWORKS=500 \
		$(GO) test -count=1 -timeout 60m -tags e2e -run '^TestScaleSimulation$$' -v ./test/e2e/

.PHONY: bench
BENCH_COUNT ?= 5
BENCH_CMD = $(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./bench/

bench: ## benchmarks with medians and ratios; rewrites the summary in bench/RESULTS.md (root)
	$(DEPS) testbed
	@mkdir -p $(BIN)
	set -o pipefail; $(BENCH_CMD) | tee $(BIN)/bench.txt
	$(GO) run ./bench/summary -results bench/RESULTS.md -command "$(BENCH_CMD)" < $(BIN)/bench.txt

.PHONY: bench-e2e
bench-e2e: ## pod start-up without a claim, with a fastpath claim, with a claim of a driver that does nothing (the DRA floor) and with that claim and the kernel's move of a veth (the move floor) on the real node, part by part, one at a time and 64 at once, the daemon's RSS, and a burst of 64 pods with CNI networks with and without --cni-max-plugins (root)
	$(DEPS) testbed
	$(GO) test -count=1 -timeout 30m -tags e2e,benche2e -run 'TestPodStartup|TestDaemonMemory|TestCNIBurst' -v ./test/e2e/

.PHONY: bench-datapath
BENCH_DATAPATH_CMD = $(GO) test -run '^$$' -bench Datapath -benchtime 3s -count $(BENCH_COUNT) ./bench/

bench-datapath: ## the data path a pod gets (AF_XDP, netdev and macvlan with kernel UDP, memif with testpmd) against the same path built by hand, packets per second and p99 latency; rewrites its summary in bench/RESULTS.md (root)
	@mkdir -p $(BIN)
	set -o pipefail; $(BENCH_DATAPATH_CMD) | tee $(BIN)/bench-datapath.txt
	$(GO) run ./bench/summary -set datapath -results bench/RESULTS.md -command "$(BENCH_DATAPATH_CMD)" < $(BIN)/bench-datapath.txt

.PHONY: bench-smoke
bench-smoke: ## every benchmark once, so none can rot, the data path's as a short run (100,000 packets a path, memif two turns a side) whose ratios are printed
	$(DEPS) testbed
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkDatapath$$' -benchtime 1x ./bench/...
	set -o pipefail; $(GO) test -run '^$$' -bench Datapath -benchtime 100000x ./bench/ | $(GO) run ./bench/summary -set datapath

# Packages whose sriov-tagged tests (TestSRIOV*, BenchmarkSRIOV*) run in the
# SR-IOV VM, one a line.
SRIOV_PKGS += ./devices
SRIOV_PKGS += ./dataplane
SRIOV_PKGS += ./dra
SRIOV_PKGS += ./bench

.PHONY: e2e-sriov
e2e-sriov: ## real SR-IOV VFs: boot the igb VM (QEMU) once and run the sriov-tagged tests in it, then 3 power cuts (make powercut) (root)
	$(DEPS) vm
	set -a && $(DEPS_ENV) && set +a && $(GO) run ./test/vm/cmd/fastpath-vm test $(SRIOV_PKGS)
	$(MAKE) --no-print-directory powercut POWERCUT_CYCLES=3

POWERCUT_CYCLES ?= 100

# The guest runs bin/powercut at its host path (the VM sees the host's root).
.PHONY: powercut
powercut: ## power cuts: POWERCUT_CYCLES (100) times the VM's power goes at a random moment while a process churns the claim store on a disk of its own and fastpathd's DRA driver prepares claims on it; after each boot the store opens, the driver starts and every acknowledged change is held (root; FASTPATH_POWERCUT_SEED=<seed> replays a run)
	$(DEPS) vm
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/powercut ./test/powercut
	set -a && $(DEPS_ENV) && set +a && $(BIN)/powercut -cycles $(POWERCUT_CYCLES)

# make test runs deps (the test bed's builds, up to an hour cold) and
# generated (before anything builds: go generate rewrites sources), then
# two tracks at once, each a make of its own: the bed's (demo, e2e, demo,
# the bed down), which waits on pods a third of its time, and the rest,
# which uses the CPU the bed's leaves and yields it (nice): the rest of the
# fast tier first (lint, the unit and privileged tests: its failures are
# the first reported), then faults, fuzz, bench-smoke, image-reproducible,
# and last real SR-IOV in the VM, whose emulated CPU must not starve (its
# guest's timeouts are real ones), while the bed's track ends. A failed step
# stops its track; make test fails once both have ended. Each step's
# output is printed whole when it ends, with how long it took. Last,
# nothing of the bed is left.
.PHONY: fast
fast: ## the fast tier of make test alone: install only what it needs (test/deps.sh fast), then generated, lint, the unit and privileged tests
	$(DEPS) fast
	$(MAKE) --no-print-directory generated
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory privileged

# step runs make with the arguments $(1) (after STEP_PREFIX, a command such
# as nice) and says how long it took (the recipe line needs +: it runs make
# through this variable).
step = @s=$$SECONDS; $(STEP_PREFIX) $(MAKE) --no-print-directory $(1) || { echo "make test: $(1) failed after $$((SECONDS-s)) s" >&2; exit 1; }; \
	echo "make test: $(1) took $$((SECONDS-s)) s"; \
	mkdir -p $(BIN) && printf '%s\t%s\t%s\n' "$(TRACK)" "$(if $(filter -j%,$(word 1,$(1))),both tracks,$(1))" "$$((SECONDS-s))" >>$(TEST_TIMES)

# TEST_TIMES collects make test's steps and their seconds, by track, for
# the table it prints at the end.
TEST_TIMES = $(BIN)/test-times.tsv
TRACK = main

.PHONY: test
test: ## what CI runs: deps, generated, then at once e2e between two demos, the core e2e cases on CRI-O and some on Kubernetes 1.34 (the bed's track) and the rest of the fast tier (lint, unit + privileged tests), the fault suite, fuzzing, benchmarks once, the image reproducible, real SR-IOV in a VM (the other track); then nothing of the bed left
	@rm -f $(TEST_TIMES)
	+$(call step,deps)
	+$(call step,generated)
	+$(call step,-j2 --output-sync=line test-bed test-side FUZZTIME=$(FUZZTIME) FAULT_ORDERS=$(FAULT_ORDERS))
	$(GO) run ./test/testbed/cmd/testbed leftovers
	@echo "make test: the time of each part (the bed's track and the other run at once):"; \
		awk -F'\t' '{ printf "  %-5s %-40s %5d s\n", $$1, $$2, $$3 }' $(TEST_TIMES)

# test-bed and test-side are make test's two tracks (see above).
.PHONY: test-bed test-side
test-bed:
	+$(call step,demo)
	+$(call step,e2e)
	+$(call step,demo)
	+$(call step,cluster-down)
	+$(call step,e2e-crio)
	+$(call step,e2e-oldest)

test-bed: TRACK = bed
test-side: STEP_PREFIX = nice -n 10
test-side: TRACK = side
test-vm: TRACK = side
test-side:
	+$(call step,lint)
	+$(call step,privileged)
	+$(call step,faults FAULT_ORDERS=$(FAULT_ORDERS))
	+$(call step,fuzz FUZZTIME=$(FUZZTIME))
	+$(call step,bench-smoke)
	+$(call step,image-reproducible)
	+@$(MAKE) --no-print-directory test-vm

# test-vm is test-side's last step, not nice: the VM's emulated CPU keeps
# its share while the bed's track ends.
.PHONY: test-vm
test-vm:
	+$(call step,e2e-sriov)

.PHONY: cluster-up
cluster-up: ## start the test bed and print its KUBECONFIG (root)
	$(DEPS) testbed
	$(GO) run ./test/testbed/cmd/testbed up

.PHONY: cluster-down
cluster-down: ## stop the test bed and remove everything it created
	$(GO) run ./test/testbed/cmd/testbed down

.PHONY: cluster-status
cluster-status: ## say whether a test bed runs and where
	$(GO) run ./test/testbed/cmd/testbed status

.PHONY: demo
demo: image ## start the test bed if needed, install the chart (fastpathd as a DaemonSet pod) and run a pod on it (root)
	$(DEPS) testbed
	$(GO) run ./test/testbed/cmd/testbed demo -image $(IMAGE_ARCHIVE)

.PHONY: clean
clean: ## remove build output (the test bed and the cache stay; see cluster-down)
	rm -rf $(BIN)
