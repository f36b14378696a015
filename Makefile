# txmanager monorepo. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ROOT      := $(CURDIR)
BIN       := $(ROOT)/bin
export PATH := $(BIN):$(PATH)
export GOWORK := $(ROOT)/go.work

# Pinned generator versions.
SQLC_VERSION               := v1.31.1
WIRE_VERSION               := v0.7.0
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
KRATOS_VERSION             := v2.9.2
GNOSTIC_VERSION            := v0.7.1
GOLANGCI_LINT_VERSION      := v2.15.0

# Every module of the workspace, as package patterns.
MODULE_DIRS := $(shell go list -m -f '{{.Dir}}')
PACKAGES    := $(addsuffix /...,$(MODULE_DIRS))
SERVICE     := $(ROOT)/txmanager-service
TEST_FLAGS  ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: run
run: ## start the service with its embedded defaults (local PostgreSQL and chain if none given), and build bin/txmctl; Ctrl-C stops both service and database
	@bash scripts/ensure-postgres.sh run
	go build -o $(BIN)/txmanager-service $(SERVICE)/cmd/txmanager-service
	go build -o $(BIN)/txmctl $(SERVICE)/client/cmd/txmctl
	@bash scripts/run.sh $$PPID $(BIN)/txmanager-service $(if $(CONF),-conf $(CONF))

.PHONY: migrate
migrate: ## apply the migrations to DATABASE_URL (or DATABASE_MIGRATION_URL) and exit
	go run $(SERVICE)/cmd/txmanager-service -migrate-only

# What scripts/check-test-databases.sh found on the tests' server before they ran.
TEST_DATABASES_BEFORE := $(BIN)/.test-databases-before

.PHONY: test
test: test-binaries ## run every test of every module with -race (finds or starts PostgreSQL itself; SKIP_DB_TESTS=1 skips those), then fail if they left a database behind
	@bash scripts/ensure-postgres.sh test
	@$(call apt-ensure,prometheus,prometheus,echo "prometheus missing: apt-get install --no-install-recommends prometheus (the dashboard and alert-rule tests run a real Prometheus and promtool)"; exit 1,the dashboard and alert-rule tests run a real Prometheus and promtool)
	@$(call apt-ensure,pg_autoctl,postgresql-15-auto-failover,echo "pg_autoctl missing: apt-get install --no-install-recommends postgresql-15-auto-failover (the failover harness test)"; [ "$(SKIP_DB_TESTS)" = 1 ] || exit 1,the failover harness test runs a pg_auto_failover formation)
	@$(call apt-ensure,chromium,chromium,echo "chromium missing: apt-get install --no-install-recommends chromium (the console's browser tests drive it)"; exit 1,the console's browser tests drive Debian's chromium)
	@bash scripts/check-test-databases.sh before $(TEST_DATABASES_BEFORE)
	go test -race -count=1 -timeout 25m $(TEST_FLAGS) $(PACKAGES)
	@if [ "$(SKIP_DB_TESTS)" = 1 ]; then echo "make test: SKIP_DB_TESTS=1, so the throwaway-cluster harness tests did not run"; \
	else $(MAKE) --no-print-directory test-throwaway; fi
	@bash scripts/check-test-databases.sh after $(TEST_DATABASES_BEFORE)
	@$(MAKE) --no-print-directory test-deploy
	@if [ "$(SKIP_DB_TESTS)" = 1 ]; then echo "make test: passed WITHOUT the database tests (SKIP_DB_TESTS=1): the data layer, the service and the library were not tested"; \
	else echo "make test: passed, database tests included"; fi

# The programs the tests run, built once into TEST_BIN (git-ignored with bin/). Tests only
# look there (test/e2e.FindTestBinary names the same folder) and fail naming this target,
# so that no test installs anything. The versions are the constants the tests check the
# binaries against, read from their Go source so that each is pinned in one place.
TEST_BIN          := $(BIN)/testbin
CLEF_VERSION      := $(shell sed -n 's/^const ModuleVersion = "\(.*\)"$$/\1/p' $(SERVICE)/test/clef/clef.go)
LOCAL_KMS_VERSION := $(shell sed -n 's/^const ModuleVersion = "\(.*\)"$$/\1/p' $(SERVICE)/test/localkms/localkms.go)
ANVIL_VERSION     := $(shell sed -n 's/^const AnvilVersion = "\(.*\)"$$/\1/p' $(SERVICE)/test/e2e/anvil.go)
ANVIL_PACKAGE     := $(shell sed -n 's/^const AnvilPackage = "\(.*\)"$$/\1/p' $(SERVICE)/test/e2e/anvil.go)

# Where the tests resolve Go modules: the workspace, and outside it deploy/ (its own module)
# and api/ and client/ (the client's dependency test resolves a caller's module from them
# with GOWORK=off, listing its whole module graph).
OFF_WORKSPACE_MODULES = $(DEPLOY) $(SERVICE)/api $(SERVICE)/client

.PHONY: test-binaries
test-binaries: ## build clef and local-kms (the signer tests run them) and unpack anvil (the second node) into bin/testbin, and download every module the tests resolve, so that `make test` then works with GOPROXY=off; quick when done
	@test -n "$(CLEF_VERSION)" -a -n "$(LOCAL_KMS_VERSION)" || { echo "no ModuleVersion constant in test/clef/clef.go or test/localkms/localkms.go"; exit 1; }
	@test -n "$(ANVIL_VERSION)" -a -n "$(ANVIL_PACKAGE)" || { echo "no AnvilVersion or AnvilPackage constant in test/e2e/anvil.go"; exit 1; }
	@mkdir -p $(TEST_BIN)
	@$(call apt-ensure,npm,npm,echo "npm missing: apt-get install --no-install-recommends npm (anvil is fetched from its npm package)"; exit 1,anvil is fetched from its npm package)
	@bash scripts/install-anvil.sh $(ANVIL_PACKAGE) $(ANVIL_VERSION) $(TEST_BIN)
	@$(call install-tool,clef,github.com/ethereum/go-ethereum/cmd/clef@$(CLEF_VERSION),$(CLEF_VERSION),$(TEST_BIN),the external-signer tests run a real clef)
	@$(call install-tool,local-kms,github.com/nsmithuk/local-kms@$(LOCAL_KMS_VERSION),$(LOCAL_KMS_VERSION),$(TEST_BIN),the AWS KMS tests run the local-kms emulator)
	@$(call module-download,the workspace)
	@for dir in $(OFF_WORKSPACE_MODULES); do (cd $$dir && export GOWORK=off && $(call module-download,$$dir)) || exit 1; done

# module-download what: download every module of the current module (or workspace) and the
# go.mod files of its whole graph, saying so first; nothing when the cache already holds them.
define module-download
	{ { GOPROXY=off go mod download 2>/dev/null && GOPROXY=off go list -m all >/dev/null 2>&1; } || { \
		echo "downloading the Go modules of $(1) (make test then needs no network: GOPROXY=off works)"; \
		go mod download && go list -m all >/dev/null; }; }
endef

.PHONY: console-screenshots
console-screenshots: ## drive the operator console in chromium through its browser test and save a screenshot of each page into docs/console/
	@$(call apt-ensure,chromium,chromium,echo "chromium missing: apt-get install --no-install-recommends chromium"; exit 1,the screenshots are taken in Debian's chromium)
	@mkdir -p docs/console
	CONSOLE_SCREENSHOTS=$(ROOT)/docs/console go test -count=1 -run 'TestConsole(InABrowser|ReleasesAQuarantinedSigner)$$' $(SERVICE)/test/integration

.PHONY: console-plans
console-plans: ## fill a database with 1,000,000 transactions and print every console page's query plans and server time (CONSOLE_ROWS to change the count)
	CONSOLE_ROWS=$${CONSOLE_ROWS:-1000000} go test -count=1 -v -timeout 30m -run 'TestConsolePagesUseIndexes$$' $(SERVICE)/test/integration

.PHONY: secret-scan
secret-scan: ## run every test with -v and fail if the output holds a key, passphrase, token or DSN password (broken configuration files included)
	@log=$$(mktemp /tmp/txm-test-log.XXXXXX); echo "running make test with -v; output in $$log"; \
	$(MAKE) --no-print-directory test TEST_FLAGS=-v >"$$log" 2>&1; tests=$$?; \
	bash scripts/scan-test-logs.sh "$$log"; scan=$$?; \
	if [ $$tests != 0 ]; then echo "the test run failed; see $$log" >&2; exit 1; fi; exit $$scan

# deploy/ is its own module outside the workspace: the Kubernetes API types it checks the
# manifests against must not move the service's dependency versions.
DEPLOY := $(ROOT)/deploy

.PHONY: test-deploy
test-deploy: ## check the Kubernetes manifests and Grafana dashboard, and run the alert rules' unit tests with promtool
	cd $(DEPLOY) && GOWORK=off go test -count=1 ./...
	@$(call apt-ensure,promtool,prometheus,echo "promtool missing: apt-get install --no-install-recommends prometheus"; exit 1,the alert rules' unit tests run promtool)
	promtool check rules $(DEPLOY)/prometheus/alerts.yaml
	promtool test rules $(DEPLOY)/prometheus/alerts_test.yaml

.PHONY: test-throwaway
test-throwaway: ## run the harness tests against a throwaway cluster it must start itself
	TEST_DATABASE_URL= PGTEST_LOCAL_DSN='postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1' \
		go test -count=1 $(ROOT)/lingo-utils/pglocal/...

BENCH_SECONDS ?= 10

.PHONY: bench
bench: ## run the benchmarks: library overhead, the writer's batches, the database's work per transfer row by step, the service's create load test (uses wrk), then signatures per second and p99 per key source
	@$(call apt-ensure,wrk,wrk,echo "wrk not installed: the load test falls back to the Go load generator")
	go test -run '^$$' -bench . -benchtime 3s $(ROOT)/lingo-utils/txmanager/...
	go test -run '^$$' -bench AllocateBatch -benchtime 2s $(SERVICE)/internal/writer/
	go test -run '^$$' -bench TransferRows -benchtime 300x -count 5 $(SERVICE)/internal/repositories/
	BENCH_SECONDS=$(BENCH_SECONDS) go test -run '^$$' -bench 'CreateHotSigner|ReceiptPipeline' -benchtime 1x -timeout 30m $(SERVICE)/test/integration/
	go test -run '^$$' -bench 'Signing' -benchtime 1x -timeout 30m $(SERVICE)/test/integration/

.PHONY: bench-chain
BENCH_CHAIN_TRANSFERS ?= 20000
# Transfers confirmed (then VACUUM (ANALYZE)) before the measured run; 0 measures a fresh database.
BENCH_CHAIN_WARMUP ?= 2000
# BENCH_CHAIN_BATCH=100 sends the service's creates in batches of 100 (POST /api/v1/tx:batch).
BENCH_CHAIN_BATCH ?= 0
bench-chain: ## geth --dev with room to spare: a bare pre-signed batched sender (the node's limit) against the service, 20 signers and 1 signer
	go run $(SERVICE)/test/cmd/txm-bench-chain -repo $(ROOT) -transfers $(BENCH_CHAIN_TRANSFERS) -warmup $(BENCH_CHAIN_WARMUP) -batch $(BENCH_CHAIN_BATCH)

FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 60s)
	go test -run '^$$' -fuzz '^FuzzDecodeJSONBody$$' -fuzztime $(FUZZTIME) $(SERVICE)/api/txmanager/v1/
	go test -run '^$$' -fuzz '^FuzzAppendJSON$$' -fuzztime $(FUZZTIME) $(SERVICE)/api/txmanager/v1/
	go test -run '^$$' -fuzz '^FuzzDecodeCreateTxBatchFast$$' -fuzztime $(FUZZTIME) $(SERVICE)/api/txmanager/v1/
	go test -run '^$$' -fuzz '^FuzzParseCreateRequest$$' -fuzztime $(FUZZTIME) $(SERVICE)/internal/domain/
	go test -run '^$$' -fuzz '^FuzzConfigLoad$$' -fuzztime $(FUZZTIME) $(SERVICE)/internal/conf/

CHAOS_SEED ?= $(shell date +%s)

.PHONY: chaos
chaos: ## fault-injection suite: failover scenario, then 3 nodes under load with kills, pauses, cut and slow database links
	go run $(SERVICE)/test/cmd/txm-chaos -repo $(ROOT) -seed $(CHAOS_SEED)

.PHONY: chaos-chain
CHAOS_CHAIN_SEEDS ?= 1 2 3
# The node implementation of make chaos-chain and make e2e: geth or anvil.
CHAIN_CLIENT ?= geth
chaos-chain: ## chain-side faults on geth --dev, or anvil with CHAIN_CLIENT=anvil (hung, refusing, lagging endpoint; hung clef (real, as the external signer); 8x base fee; node restart losing its mempool; late funding), once per seed in CHAOS_CHAIN_SEEDS
	$(if $(filter anvil,$(CHAIN_CLIENT)),@$(MAKE) --no-print-directory test-binaries)
	@for seed in $(CHAOS_CHAIN_SEEDS); do \
	  go run $(SERVICE)/test/cmd/txm-chaos -repo $(ROOT) -scenario chain -chain-client $(CHAIN_CLIENT) -seed $$seed -signers 4 -clients 4 || exit 1; \
	done

.PHONY: chaos-db
CHAOS_DB_SEEDS ?= 1 2 3
CHAOS_DB_MODES ?= sync async
chaos-db: ## database failovers under load on a pg_auto_failover formation (planned, primary killed, killed while the standby lags), synchronous and asynchronous replication, once per seed in CHAOS_DB_SEEDS
	@$(call apt-ensure,pg_autoctl,postgresql-15-auto-failover,echo "pg_autoctl missing: apt-get install postgresql-15-auto-failover"; exit 1)
	@for seed in $(CHAOS_DB_SEEDS); do for mode in $(CHAOS_DB_MODES); do \
	  go run $(SERVICE)/test/cmd/txm-chaos -repo $(ROOT) -scenario db -seed $$seed -nodes 2 -signers 4 -clients 32 $$([ $$mode = async ] && echo -async) || exit 1; \
	done; done

.PHONY: chaos-webhooks
chaos-webhooks: ## webhooks under about 200 creates a second on 3 nodes: a receiver failing 30% of deliveries and down for a minute, the delivering node killed; every completion delivered in order, signatures valid, lag back under 2 s within 30 s
	go run $(SERVICE)/test/cmd/txm-chaos -repo $(ROOT) -scenario webhooks -seed $(CHAOS_SEED) -signers 8

.PHONY: example-e2e
example-e2e: ## the payouts example against the real service with kills mid-relay, mid-consume and of txmanager; prints the invariant table
	go run $(SERVICE)/test/cmd/txm-example-e2e -repo $(ROOT)

.PHONY: e2e
e2e: ## run a node (CHAIN_CLIENT=geth: v1.17.8 --dev, built; CHAIN_CLIENT=anvil: 1.7.1, from make test-binaries) and txm-devchain, drive 500 txs from 5 signers on each to CONFIRMED and check nonces on chain
	$(if $(filter anvil,$(CHAIN_CLIENT)),@$(MAKE) --no-print-directory test-binaries)
	go run $(SERVICE)/test/cmd/txm-e2e -repo $(ROOT) -chain-client $(CHAIN_CLIENT)

MAX_TRACKED_BYTES := 1048576

.PHONY: lint
lint: tools ## golangci-lint (.golangci.yml) and go vet on every module, gofmt, and no tracked file over 1 MB (build outputs)
	@big=$$(git ls-files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$$1 > $(MAX_TRACKED_BYTES) {print "  " $$2 " (" $$1 " bytes)"}'); \
	if [ -n "$$big" ]; then echo "tracked files over 1 MB (binaries and build outputs do not belong in git):"; echo "$$big"; exit 1; fi
	go vet $(PACKAGES)
	@for dir in $(MODULE_DIRS); do echo "golangci-lint $$dir"; (cd $$dir && golangci-lint run --config $(ROOT)/.golangci.yml ./...) || exit 1; done
	cd $(DEPLOY) && GOWORK=off go vet ./... && GOWORK=off golangci-lint run --config $(ROOT)/.golangci.yml ./...
	@unformatted=$$(gofmt -l $(MODULE_DIRS) $(DEPLOY)); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

.PHONY: tools
tools: ## install the pinned generators and golangci-lint into ./bin (protoc itself comes from Debian's protobuf-compiler)
	@mkdir -p $(BIN)
	@$(call apt-ensure,protoc,protobuf-compiler libprotobuf-dev,echo "protoc missing: apt-get install --no-install-recommends protobuf-compiler libprotobuf-dev"; exit 1,make generate compiles the API's .proto files (libprotobuf-dev holds the well-known types they import))
	@$(call install-tool,sqlc,github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION),$(SQLC_VERSION))
	@$(call install-tool,wire,github.com/google/wire/cmd/wire@$(WIRE_VERSION),$(WIRE_VERSION))
	@$(call install-tool,protoc-gen-go,google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION),$(PROTOC_GEN_GO_VERSION))
	@$(call install-tool,protoc-gen-go-grpc,google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION),$(PROTOC_GEN_GO_GRPC_VERSION))
	@$(call install-tool,protoc-gen-openapi,github.com/google/gnostic/cmd/protoc-gen-openapi@$(GNOSTIC_VERSION),$(GNOSTIC_VERSION))
	@$(call install-tool,golangci-lint,github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION),$(GOLANGCI_LINT_VERSION))

# apt-ensure command,packages,otherwise[,why]: when the command is missing and this is root
# with apt, say what is installed and why, then install the Debian packages without their
# recommended ones (the commands are in the packages themselves; prometheus's recommends
# alone pull in the node exporter and its collectors), refreshing the package lists
# only if the first try fails; otherwise run the shell words in "otherwise".
define apt-ensure
	command -v $(1) >/dev/null || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing Debian packages $(2) (apt-get, without recommends)$(if $(4),: $(4))"; \
			export DEBIAN_FRONTEND=noninteractive; \
			apt-get install -y --no-install-recommends $(2) >/dev/null 2>&1 || \
				{ apt-get update >/dev/null && apt-get install -y --no-install-recommends $(2) >/dev/null; }; \
		else $(3); fi; }
endef

# install-tool name,module@version,version[,dir[,why]]: go install into dir (default ./bin)
# only when the stamp's version differs or the binary is missing, saying so (and why) first.
define install-tool
	dir=$(or $(4),$(BIN)); if [ "$$(cat $$dir/.$(1).version 2>/dev/null)" != "$(3)" ] || [ ! -x $$dir/$(1) ]; then \
		echo "installing $(2) into $$dir$(if $(5),: $(5))"; GOWORK=off GOBIN=$$dir go install $(2) && echo "$(3)" > $$dir/.$(1).version; \
	fi
endef

.PHONY: generate
generate: tools ## regenerate sqlc, protobuf (Go, gRPC, error helpers, the OpenAPI document) and Wire code
	@if [ -f sqlc.yaml ] && ls migrations/*.sql >/dev/null 2>&1; then echo "sqlc generate"; sqlc generate -f sqlc.yaml; fi
	@if ls $(SERVICE)/api/txmanager/v1/*.proto >/dev/null 2>&1; then \
		echo "protoc api/txmanager/v1: Go, gRPC, error helpers, OpenAPI"; \
		gen=$$(mktemp -d) && trap 'rm -rf "$$gen"' EXIT && cd $(SERVICE) && \
		go build -o $$gen/protoc-gen-go-errors ./api/internal/cmd/protoc-gen-go-errors && \
		third=$$(go list -m -f '{{.Dir}}' github.com/go-kratos/kratos/v2)/third_party && \
		protoc -I . -I $$third --plugin=protoc-gen-go-errors=$$gen/protoc-gen-go-errors \
			--go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. --go-errors_out=paths=source_relative:. \
			api/txmanager/v1/*.proto && \
		protoc -I . -I $$third --openapi_out=default_response=false,enum_type=string:$$gen \
			api/txmanager/v1/txmanager.proto api/txmanager/v1/admin.proto && \
		go run ./api/internal/cmd/openapi-finish < $$gen/openapi.yaml > $$gen/finished.yaml && \
		mv $$gen/finished.yaml api/openapi/openapi.yaml; fi
	@if [ -f $(SERVICE)/internal/app/wire.go ]; then echo "wire"; cd $(SERVICE)/internal/app && wire gen . >/dev/null; fi
	@echo "docs/configuration.md"; go run $(SERVICE)/internal/conf/confdoc -conf $(SERVICE)/internal/conf > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md
	@echo "sqlc and wire examples/payouts"; cd $(ROOT)/examples/payouts && sqlc generate -f sqlc.yaml && cd cmd/payouts && wire gen . >/dev/null

# Where generated code lives; check-generate compares exactly these paths with the commit.
GENERATED := txmanager-service/internal/repositories/sqlcdb txmanager-service/api txmanager-service/internal/app/wire_gen.go \
	examples/payouts/internal/repositories/payoutsdb examples/payouts/cmd/payouts/wire_gen.go docs/configuration.md

.PHONY: check-generate
check-generate: generate ## regenerate, then fail if any generated file differs from the commit
	@changed=$$(git status --porcelain --untracked-files=all -- $(GENERATED)); \
	if [ -n "$$changed" ]; then \
		echo "generated code is stale or was edited by hand:"; echo "$$changed"; \
		git --no-pager diff --stat -- $(GENERATED); exit 1; fi
	@echo "generated code is fresh"
