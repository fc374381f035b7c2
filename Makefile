# kforge — see README.md. `make demo` and `make test` are the two commands the README starts with.
GO       ?= go
SHELL    := bash
BIN      := bin/kforge
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
# Integration tests fail (instead of skipping) when their prerequisites are missing.
TESTENV  := KFORGE_REQUIRE_INTEGRATION=1
# The e2e package runs its lab clusters in two lanes side by side, then the VM test alone, on this
# 2-core machine (e2e/lanes_test.go, docs/testing.md): about 60 minutes warm (964f8de's CI: 3558 s); cold,
# building the bundle's releases, the conformance kit and the lab's images adds about 35 minutes. CI allows 90.
TESTTIME ?= 80m

.PHONY: all build deps test test-quick demo bench fuzz conformance clean

all: build

## build: bin/kforge, statically linked (kforge controller image puts this very binary in an image).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kforge

deps:
	hack/deps.sh

## test: every test — unit, golden, fake-host, and integration/end-to-end on real parts (needs root).
## Prints what go test prints, then each e2e test's duration (hack/testreport), so growth is seen.
## Every other package first (two at a time), then the e2e labs alone: beside the labs' first
## minutes those packages' real etcd, API servers and lab hosts starved on 2 cores (a9eb524's CI:
## a leader hand-over timed out; docs/testing.md).
test: deps
	$(GO) build -o bin/testreport ./hack/testreport
	set -o pipefail; { $(TESTENV) $(GO) test -json -count=1 -timeout $(TESTTIME) $$($(GO) list ./... | grep -v '/e2e$$'); a=$$?; \
		$(TESTENV) $(GO) test -json -count=1 -timeout $(TESTTIME) ./e2e; b=$$?; exit $$((a | b)); } | bin/testreport

## test-quick: unit, golden and fake-host tests only (no root, no network namespaces).
test-quick:
	$(GO) test -short -count=1 ./...

## demo: what a user does first; see README.md.
demo: deps build
	hack/demo.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./...

## conformance: Kubernetes' own conformance suite, built offline, against a lab cluster: every
## [Conformance] spec that is not [Serial], [Disruptive] or [Slow]. KUBERNETES=v1.37.2 picks the
## release (default: kforge's default); PROXY_MODE=nftables puts kube-proxy in nftables mode;
## NETPOL=1 runs sig-network's NetworkPolicy specs ([Feature:NetworkPolicy]) instead;
## DUALSTACK=1 the dual-stack specs ([Feature:IPv6DualStack]) on a dual-stack cluster.
## JUnit, the suite's log and a summary by SIG land in
## conformance-report/<version>[-<mode>][-netpol][-dualstack]/.
## `make test` runs a slice of it (DNS, Services, webhooks).
KUBERNETES ?=
PROXY_MODE ?=
NETPOL ?=
DUALSTACK ?=
conformance: deps
	KFORGE_CONFORMANCE=full KFORGE_CONFORMANCE_REPORT=$(CURDIR)/conformance-report KFORGE_CONFORMANCE_VERSION=$(KUBERNETES) KFORGE_CONFORMANCE_PROXY_MODE=$(PROXY_MODE) KFORGE_CONFORMANCE_NETPOL=$(NETPOL) KFORGE_CONFORMANCE_DUALSTACK=$(DUALSTACK) \
		$(TESTENV) $(GO) test -count=1 -v -timeout 4h -run '^TestConformance$$' ./e2e

## fuzz: the inventory loader fuzzer; FUZZTIME=10m by default.
FUZZTIME ?= 10m
fuzz:
	$(GO) test ./inventory -run '^$$' -fuzz FuzzLoad -fuzztime $(FUZZTIME)

clean:
	rm -rf bin
