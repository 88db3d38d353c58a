# snapflip — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go

TEST_PG_PORT ?= 55432
DEMO_PG_PORT ?= 55433
DEMO_EMULATOR_PORT ?= 8086
DEMO_API_ADDR ?= 127.0.0.1:8080

TEST_PG_DSN := postgres://postgres@127.0.0.1:$(TEST_PG_PORT)/postgres?sslmode=disable
# A second server and its hot standby, for the tests of a standby source.
TEST_REPLICATED_PORT ?= 55434
TEST_STANDBY_PORT ?= 55435
TEST_REPLICATED_DSN := postgres://postgres@127.0.0.1:$(TEST_REPLICATED_PORT)/postgres?sslmode=disable
TEST_STANDBY_DSN := postgres://postgres@127.0.0.1:$(TEST_STANDBY_PORT)/postgres?sslmode=disable
GOTEST_FLAGS ?= -race -count=1 -timeout 20m -parallel 8 -p 3

# LONG_TESTS are the suites too long for `make test`, which `make e2e` runs: every
# crash point, faults and restarts mid-sync, load with flips, the generative
# histories, filters and policies, the real schema (Pagila), retention's keep-alive,
# several syncer replicas, the long outages, a pin under writes, and pgbench's bank
# invariant through held collections. `make test` runs every other test.
LONG_TESTS := ^(TestCrashAtRandomTimes|TestCrashAtEveryPoint|TestSIGTERMMidSync|TestFaultSlowBigtable|TestFaultEmulatorStopsMidSync|TestFaultPostgresRestartsMidSync|TestShutdownAfterBigtableStops|TestShutdownAfterPostgresStops|TestServedAfterPostgresRestart|TestReplicaThroughOutages|TestLoadWithFlips|TestLogicalProbesAreAllServed|TestCommitsAreServedWithinTheBudget|TestKeyRotationUnderLoad|TestGenerative|TestGenerativeFilters|TestGenerativeWatch|TestRowScopesAgainstPostgres|TestReplicaFollowsHistories|TestPagila|TestTTLKeepAlive|TestTTLKeepAlivePinned|TestDefinitionChangesAreServed|TestReplicasPublishEachChangeOnce|TestReplicasPublishEachSlotOnce|TestSyncerHealth|TestTokenOfACommitHeldInSyncReplication|TestReadYourWrites|TestReconnectsPromptlyAfterALongOutage|TestEntriesThroughPackedBlocks|TestStreamBoundsChangedKeys|TestConnectTimeoutByDefault|TestFilterCacheCarriesAcrossFlips|TestPinnedUnderWrites|TestBankInvariantThroughHolds|TestGenerativePolicy)$$

.PHONY: all build build-static chaos test e2e demo bench lint fmt vet emulator pg-start pg-stop clean screenshot

all: build

## build: compile both binaries and the emulator into bin/ (-buildvcs=auto records the
## commit that `syncer version` prints, even where GOFLAGS turns it off)
build:
	$(GO) build -buildvcs=auto -o bin/ ./cmd/syncer ./cmd/metadata-api
	$(GO) build -o bin/bigtable-emulator cloud.google.com/go/bigtable/cmd/emulator

## build-static: the static binaries the container images hold (the Dockerfile runs
## the same commands: deploy/deploy_test.go checks); VERSION and COMMIT, empty by
## default, set what `syncer version` prints, as the Dockerfile's build arguments do
build-static:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w -X github.com/snapflip/snapflip/internal/cli.Version=$(VERSION) -X github.com/snapflip/snapflip/internal/cli.Commit=$(COMMIT)" -o bin/static/syncer ./cmd/syncer
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w -X github.com/snapflip/snapflip/internal/cli.Version=$(VERSION) -X github.com/snapflip/snapflip/internal/cli.Commit=$(COMMIT)" -o bin/static/metadata-api ./cmd/metadata-api

## test: start a throwaway Postgres (and install promtool if missing, for the
## alerting rules' tests), run every test but LONG_TESTS with -race, stop Postgres
test:
	$(call go_test,-skip '$(LONG_TESTS)')

## e2e: the same throwaway services, and the LONG_TESTS alone
e2e:
	$(call go_test,-run '$(LONG_TESTS)')

# go_test is what test and e2e share: Postgres started and stopped, the tests chosen
# by $(1). The emulator is built while the tests compile (a test that needs it first
# waits while bin/bigtable-emulator.building exists), and deploy/'s module, which
# needs neither, is tested meanwhile.
define go_test
	@deploy/local/promtool.sh
	@deploy/local/postgres.sh start $(TEST_PG_PORT)
	@deploy/local/postgres.sh start $(TEST_REPLICATED_PORT) && deploy/local/postgres.sh standby $(TEST_STANDBY_PORT) $(TEST_REPLICATED_PORT)
	@status=0; mkdir -p bin; rm -f bin/bigtable-emulator; touch bin/bigtable-emulator.building; \
	  trap 'rm -f bin/bigtable-emulator.building; kill $$emulator $$deploy 2>/dev/null' EXIT; \
	  ($(GO) build -o bin/bigtable-emulator.tmp cloud.google.com/go/bigtable/cmd/emulator && mv bin/bigtable-emulator.tmp bin/bigtable-emulator; \
	    s=$$?; rm -f bin/bigtable-emulator.building; exit $$s) & emulator=$$!; \
	  (cd deploy && $(GO) test $(GOTEST_FLAGS) $(1) ./...) & deploy=$$!; \
	  SNAPFLIP_TEST_POSTGRES_DSN='$(TEST_PG_DSN)' SNAPFLIP_TEST_REPLICATED_DSN='$(TEST_REPLICATED_DSN)' SNAPFLIP_TEST_STANDBY_DSN='$(TEST_STANDBY_DSN)' \
	    SNAPFLIP_TEST_EMULATOR=$(CURDIR)/bin/bigtable-emulator $(GO) test $(GOTEST_FLAGS) $(1) ./... || status=$$?; \
	  wait $$emulator || status=$$?; wait $$deploy || status=$$?; \
	  deploy/local/postgres.sh stop $(TEST_STANDBY_PORT); deploy/local/postgres.sh stop $(TEST_REPLICATED_PORT); \
	  deploy/local/postgres.sh stop $(TEST_PG_PORT); exit $$status
endef

## demo: Postgres with the example schema, the Bigtable emulator, the syncer on a schedule
## and the metadata API; prints example requests. Ctrl-C stops everything.
demo: build
	@deploy/local/demo.sh

## chaos: the long form of the reliability suite: 50 random kills mid-sync, 60 s of load with flips, an 8,000-operation linearizability check, 200 generative schemas, 2,000 drawn auth policies, 20 watched generative histories, 3,000 logical-mode probes, 200 read-your-writes rounds per watch mode, 16 writers x 100 writes with tokens, 1,000 reads across two replicas, each carrying the last answer's token
chaos:
	@$(GO) build -o bin/bigtable-emulator cloud.google.com/go/bigtable/cmd/emulator
	@deploy/local/postgres.sh start $(TEST_PG_PORT)
	@status=0; SNAPFLIP_RYW_LOOPS=200 SNAPFLIP_RYW_WRITES=100 SNAPFLIP_SESSION_READS=1000 SNAPFLIP_CHAOS_KILLS=50 SNAPFLIP_PROBES=3000 SNAPFLIP_GEN_WATCH_SCHEMAS=20 SNAPFLIP_LOAD_SECONDS=60 SNAPFLIP_LIN_OPS=1000 SNAPFLIP_GEN_SCHEMAS=200 SNAPFLIP_GEN_POLICIES=2000 SNAPFLIP_PIN_SECONDS=120 SNAPFLIP_TEST_POSTGRES_DSN='$(TEST_PG_DSN)' SNAPFLIP_TEST_EMULATOR=$(CURDIR)/bin/bigtable-emulator \
	  $(GO) test -race -count=1 -timeout 60m -run 'Crash|Fault|LoadWithFlips|Linearizab|Generative|Probes|ReadYourWrites|SessionToken|Pinned' -v ./e2e/ ./store/ || status=$$?; \
	  deploy/local/postgres.sh stop $(TEST_PG_PORT); exit $$status

## bench: the benchmarks (needs the same throwaway Postgres), then the table of figures
## in docs/performance.md's format; BENCH=regexp runs only the matching benchmarks,
## BENCH_DOCS=1 also writes the table into docs/performance.md (only from a whole run
## that passed, or with BENCH_MERGE=1: a partial table would drop the other rows);
## BENCH_MERGE=1 keeps the last run's figures and replaces those of the benchmarks run
bench:
	@command -v wrk >/dev/null || { echo "installing wrk (the HTTP load generator) with apt-get"; apt-get update -qq && apt-get install -y -qq wrk; }
	@$(GO) build -o bin/bigtable-emulator cloud.google.com/go/bigtable/cmd/emulator
	@deploy/local/postgres.sh start $(TEST_PG_PORT)
	@[ -n "$(BENCH_MERGE)" ] || rm -f bin/bench-figures.jsonl; status=0; \
	  SNAPFLIP_BENCH_FIGURES=$(CURDIR)/bin/bench-figures.jsonl SNAPFLIP_TEST_POSTGRES_DSN='$(TEST_PG_DSN)' SNAPFLIP_TEST_EMULATOR=$(CURDIR)/bin/bigtable-emulator \
	  $(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -benchtime 1x -timeout 60m ./... || status=$$?; \
	  docs=; if [ -n "$(BENCH_DOCS)" ]; then \
	    if [ $$status -ne 0 ] || { [ -n "$(BENCH)" ] && [ -z "$(BENCH_MERGE)" ]; }; then echo "BENCH_DOCS: not writing docs/performance.md from a failed or partial run" >&2; status=1; \
	    else docs="-docs docs/performance.md"; fi; fi; \
	  SNAPFLIP_TEST_POSTGRES_DSN='$(TEST_PG_DSN)' $(GO) run ./internal/bench/perftable -figures bin/bench-figures.jsonl $$docs || status=$$?; \
	  deploy/local/postgres.sh stop $(TEST_PG_PORT); exit $$status

## screenshot: render the status page of a demo in headless Chromium into docs/status.png
screenshot: build
	@command -v chromium >/dev/null || { echo "installing chromium with apt-get"; apt-get update -qq && apt-get install -y -qq chromium; }
	@DEMO_SCREENSHOT=$(CURDIR)/docs/status.png deploy/local/demo.sh

## emulator: run the Bigtable emulator in the foreground on DEMO_EMULATOR_PORT
emulator:
	$(GO) run cloud.google.com/go/bigtable/cmd/emulator -host 127.0.0.1 -port $(DEMO_EMULATOR_PORT)

lint: vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

pg-start:
	deploy/local/postgres.sh start $(TEST_PG_PORT)
	deploy/local/postgres.sh start $(TEST_REPLICATED_PORT)
	deploy/local/postgres.sh standby $(TEST_STANDBY_PORT) $(TEST_REPLICATED_PORT)
	@echo "export SNAPFLIP_TEST_POSTGRES_DSN='$(TEST_PG_DSN)' SNAPFLIP_TEST_REPLICATED_DSN='$(TEST_REPLICATED_DSN)' SNAPFLIP_TEST_STANDBY_DSN='$(TEST_STANDBY_DSN)'"

pg-stop:
	deploy/local/postgres.sh stop $(TEST_STANDBY_PORT)
	deploy/local/postgres.sh stop $(TEST_REPLICATED_PORT)
	deploy/local/postgres.sh stop $(TEST_PG_PORT)

clean:
	rm -rf bin
