# fastpath: see README.md. `make` alone lists the targets.

SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := bin
DEPS := test/deps.sh
DEPS_ENV = eval "$$($(DEPS) env)"
# Every package but the end-to-end suite and the benchmarks.
PKGS = $(shell $(GO) list ./... | grep -v -e /test/e2e -e /bench)
E2E_TIMEOUT ?= 30m

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install Debian packages and build the test bed's components (cached in ~/.cache/fastpath)
	$(DEPS) all

.PHONY: build
build: ## build bin/fastpathd
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN)/fastpathd ./cmd/fastpathd

.PHONY: generate
generate: ## regenerate generated code (installs clang and libbpf headers when missing)
	$(DEPS) apt
	$(GO) generate ./...

.PHONY: generated
generated: ## regenerate, and fail if anything generated differs from what is committed
	$(DEPS) apt
	$(GO) generate ./...
	@if [ -n "$$(git status --porcelain -- bpf devices/testdata)" ]; then \
		git status --short -- bpf devices/testdata >&2; \
		echo "generated files differ from what is committed: run make generate and commit" >&2; exit 1; fi

.PHONY: lint
lint: ## go vet, gofmt and golangci-lint
	$(DEPS) lint
	$(GO) vet -tags privileged,e2e,benche2e,sriov ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum are not tidy: run go mod tidy" >&2; $(GO) mod tidy -diff; exit 1; }
	@bad=$$($(GO) list -deps ./dataplane/... | grep '^github.com/fastpath-dra/fastpath/dra'); \
		if [ -n "$$bad" ]; then echo "dataplane must not import package dra:" $$bad >&2; exit 1; fi
	@bad=$$($(GO) list -deps ./dra/api/... | grep -E 'kubeletplugin|vishvananda/netlink|cilium/ebpf|containerd/nri'); \
		if [ -n "$$bad" ]; then echo "the config API must not import:" $$bad >&2; exit 1; fi
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(DEPS_ENV); "$$FASTPATH_GOLANGCI_LINT" run ./...

.PHONY: unit
unit: ## unit tests (discovery needs the pci.ids package: make deps)
	$(GO) test -race -count=1 $(PKGS)

.PHONY: privileged
privileged: ## unit and privileged tests (root: netns, veth, BPF)
	$(DEPS) apt
	$(GO) test -race -count=1 -tags privileged $(PKGS)

FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME (default 10s) each
	GO=$(GO) FUZZTIME=$(FUZZTIME) test/fuzz.sh $(PKGS)

.PHONY: e2e
e2e: ## end-to-end tests on a real single-node Kubernetes (root; uses a running bed or starts its own)
	$(DEPS) testbed
	$(GO) test -race -count=1 -timeout $(E2E_TIMEOUT) -tags e2e -v ./test/e2e/...

.PHONY: bench
BENCH_COUNT ?= 5
BENCH_CMD = $(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./bench/

bench: ## benchmarks with medians and ratios; rewrites the summary in bench/RESULTS.md (root)
	$(DEPS) testbed
	@mkdir -p $(BIN)
	set -o pipefail; $(BENCH_CMD) | tee $(BIN)/bench.txt
	$(GO) run ./bench/summary -results bench/RESULTS.md -command "$(BENCH_CMD)" < $(BIN)/bench.txt

.PHONY: bench-e2e
bench-e2e: ## pod start-up with and without a claim on the real node, and the daemon's RSS (root)
	$(DEPS) testbed
	$(GO) test -count=1 -timeout 30m -tags e2e,benche2e -run TestPodStartup -v ./test/e2e/

.PHONY: bench-smoke
bench-smoke: ## every benchmark once, so none can rot
	$(DEPS) testbed
	$(GO) test -run '^$$' -bench . -benchtime 1x ./bench/...

# Packages whose sriov-tagged tests (TestSRIOV*, BenchmarkSRIOV*) run in the
# SR-IOV VM, one a line.
SRIOV_PKGS += ./devices
SRIOV_PKGS += ./dataplane
SRIOV_PKGS += ./bench

.PHONY: e2e-sriov
e2e-sriov: ## real SR-IOV VFs: boot the igb VM (QEMU) once and run the sriov-tagged tests in it (root)
	$(DEPS) vm
	set -a && $(DEPS_ENV) && set +a && $(GO) run ./test/vm/cmd/fastpath-vm test $(SRIOV_PKGS)

.PHONY: test
test: deps generated lint privileged fuzz e2e bench-smoke e2e-sriov ## what CI runs: deps, regenerated code unchanged, lint, unit + privileged tests, fuzzing, e2e, benchmarks once, real SR-IOV in a VM

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
demo: build ## start the test bed if needed, run fastpathd beside the node and a pod on it (root)
	$(DEPS) testbed
	$(GO) run ./test/testbed/cmd/testbed demo -fastpathd $(BIN)/fastpathd

.PHONY: clean
clean: ## remove build output (the test bed and the cache stay; see cluster-down)
	rm -rf $(BIN)
