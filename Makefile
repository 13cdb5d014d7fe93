# PandaStack — the names scripts and operators rely on.
#   make setup   install system packages and bin/versitygw (idempotent, non-interactive; needs root)
#   make build   the web console (web/, npm), then bin/pandastack (console embedded) and bin/pandastack-guest
#   make up      setup + build + bin/pandastack up
#   make test    setup + build + every test (real microVMs)
#   make bench   benchmarks; writes bench/results.json
#   make test-catalog     build every catalog template and check its job (slow)
#   make bench-templates  per-template size, cold bake and create p50 (slow)
#   make bench-scale      the fleet bench: PostgreSQL, 2 servers, 1,000 fake hosts (~15 min; SCALE_ARGS)

SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
DEB_PACKAGES := qemu-system-x86 qemu-utils debootstrap xfsprogs busybox-static cpio e2fsprogs \
	iproute2 nftables procps util-linux postgresql python3 ca-certificates nodejs chromium
export PANDASTACK_VM_TESTS ?= 1
VERSITYGW_VERSION := v1.8.0

.PHONY: setup build up test test-catalog bench bench-templates bench-scale vet clean

# apt's own output goes to SETUP_LOG (its end is shown if apt fails): one line per stage here.
SETUP_LOG ?= /var/log/pandastack-setup.log
APT_FAILED = { tail -n 30 $(SETUP_LOG); echo "make setup: apt failed (above: the end of $(SETUP_LOG))"; exit 1; }

setup:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ] || ! apt-cache show linux-image-cloud-amd64 >/dev/null 2>&1; then \
		echo "make setup: installing" $$missing "(apt's output: $(SETUP_LOG))"; \
		export DEBIAN_FRONTEND=noninteractive; \
		{ apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; } >>$(SETUP_LOG) 2>&1 || $(APT_FAILED); \
	else echo "make setup: system packages present"; fi
	@command -v npm >/dev/null || { echo "make setup: installing npm (apt's output: $(SETUP_LOG))"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >>$(SETUP_LOG) 2>&1 || $(APT_FAILED); }
	@test -x bin/versitygw || { echo "make setup: installing versitygw $(VERSITYGW_VERSION) (the S3 server the blob-store tests use)"; \
		GOBIN=$(CURDIR)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION) >>$(SETUP_LOG) 2>&1 \
		|| { tail -n 20 $(SETUP_LOG); echo "make setup: go install versitygw failed (above: the end of $(SETUP_LOG))"; exit 1; }; }

# The guest agent is built without a VCS stamp: it (and so the guest image cache key) changes only
# when its code does, not with every commit.
# The console (web/) is built first and embedded by package web: npm ci when the lock file is newer
# than node_modules, vite build when a source is newer than the build (the SDK's sources give it
# some of its wire types).
WEB_SRC := $(shell find web/src -type f 2>/dev/null) web/index.html web/vite.config.ts web/tsconfig.json web/package.json \
	sdk/typescript/src/client.ts sdk/typescript/src/functions.ts

web/node_modules/.package-lock.json: web/package-lock.json web/package.json
	cd web && npm ci --no-audit --no-fund --loglevel=error

# The SDK's sources import src/version.ts, which its build script generates (git ignores it).
sdk/typescript/src/version.ts: sdk/typescript/package.json
	node sdk/typescript/scripts/build.mjs --version-only

web/dist/console/index.html: web/node_modules/.package-lock.json $(WEB_SRC) sdk/typescript/src/version.ts
	cd web && npm run --silent build

build: web/dist/console/index.html
	mkdir -p bin
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/pandastack ./cmd/pandastack
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w' -o bin/pandastack-guest ./cmd/pandastack-guest

up: setup build
	bin/pandastack up $(UP_ARGS)

vet:
	$(GO) vet ./...

# go test runs two packages at a time, in the order named: the longest VM packages first, so
# the short ones fill in beside them instead of one long package running alone at the end.
LONG_TEST_PKGS := ./internal/hostagent/ ./internal/api/ ./internal/faults/ ./bench/

test: setup build vet
	$(GO) test -count=1 -timeout 60m $(LONG_TEST_PKGS) ./... 2>&1 | tee /tmp/pandastack-test.log; exit $${PIPESTATUS[0]}
	bash sdk/test.sh

IMAGE_CACHE ?= $(or $(PANDASTACK_IMAGE_CACHE),/var/tmp/pandastack-images)

bench: setup build
	$(GO) run ./bench -out bench/results.json -image-cache $(IMAGE_CACHE)

# The catalog suite builds every catalog template (several GiB of packages, tens of minutes the
# first time) and checks each one's job in a sandbox.
test-catalog: setup build
	PANDASTACK_CATALOG_TESTS=1 $(GO) test -count=1 -timeout 120m -run TestCatalogTemplates -v ./internal/hostagent/

bench-templates: setup build
	$(GO) run ./bench -out bench/results.json -image-cache $(IMAGE_CACHE) -suites templates

# No VMs: docs/operations.md "The scale bench". SCALE_ARGS="-hosts 50 -live 2000 -phase 20s" for a quick look.
bench-scale: setup build
	$(GO) run ./bench/scale -out bench/results.json -bin bin/pandastack $(SCALE_ARGS)

clean:
	rm -rf bin
