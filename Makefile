# Every target works from a fresh clone; see README.md.
.PHONY: test test-quick demo bench bench-quick bench-full bench-render bench-renew fuzz pictures mutation rules

# Runs gofmt, go vet and go test -race over every module in go.work,
# starting the database servers the store tests need.
test:
	bash scripts/test-all

# gofmt, go vet and go test -short of every module: no servers and no race
# detector, nothing installed; the tests that need a server are skipped.
# It needs curl; without Chromium it leaves out the demo's browser test,
# and says so.
test-quick:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:" >&2; echo "$$unformatted" >&2; exit 1; fi
	@skip=""; \
	if ! command -v "$${IDEMKIT_CHROMIUM:-chromium}" >/dev/null; then \
	  echo "test-quick: no chromium on PATH: the demo's browser test is left out (make test installs Chromium and runs it)" >&2; \
	  skip='^TestCheckoutInBrowser$$'; \
	fi; \
	failed=""; \
	for dir in $$(go list -m -f '{{.Dir}}'); do \
	  echo "== module $$dir"; \
	  (cd "$$dir" && go vet ./... && go test -short -count=1 -skip "$$skip" ./...) || failed="$$failed $$dir"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed" >&2; exit 1; fi

demo:
	go run ./demo/payments

bench:
	go test -run XXX -bench . -benchmem ./core/...

# Load benchmarks (bench/): bench-quick takes under 5 minutes, for routine
# use; bench-full takes about 35 minutes on an idle machine and regenerates
# the user's page docs/benchmarks.md and its chart, the project's targets in
# bench/TARGETS.md, and the run's raw figures in bench/benchmarks.json, from
# which bench-render renders the pages again without measuring. Both start
# a PostgreSQL and a Redis as the store tests do (the stores a fleet runs
# on are measured against them) and stop them when the run ends.
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/idemkit-bench
BENCH_PAGES = -out docs/benchmarks.md -chart docs/img/benchmarks.svg -targets bench/TARGETS.md
WITH_BENCH_SERVERS = bash -c 'source scripts/servers.sh && source scripts/redis-servers.sh && trap "stop_redis_servers; stop_servers" EXIT && start_postgres && start_redis && "$$@"' bench-servers

bench-quick:
	$(WITH_BENCH_SERVERS) go run ./bench/cmd/loadbench -quick -out $(BENCH_OUT)/benchmarks.md -chart $(BENCH_OUT)/benchmarks.svg -targets $(BENCH_OUT)/TARGETS.md -json $(BENCH_OUT)/benchmarks.json

bench-full:
	$(WITH_BENCH_SERVERS) go run ./bench/cmd/loadbench $(BENCH_PAGES) -json bench/benchmarks.json

bench-render:
	go run ./bench/cmd/loadbench -from bench/benchmarks.json $(BENCH_PAGES)

# Renewal capacity (bench/cmd/renewbench): how many long handlers one Engine
# keeps on each store without a lost lease, with the test servers started
# as make test starts them. Takes a few minutes.
bench-renew:
	bash -c 'source scripts/servers.sh && source scripts/redis-servers.sh && trap "stop_redis_servers; stop_servers" EXIT && start_servers && start_redis_servers && go run ./bench/cmd/renewbench'

# Plants each mutant of scripts/mutation/mutants.txt (realistic bugs in the
# core, the stores and the adapters) in a copy of HEAD, one at a time, runs
# the tests that should notice it, and prints the score and the survivors.
# Not part of CI: about an hour on 2 cores. MUTANTS=id,... runs some only;
# SIM=1 runs each against the deterministic simulation alone (TestSim of its
# module, with CI's budget), to count what the simulation catches by itself.
mutation:
	bash -c 'source scripts/servers.sh && source scripts/redis-servers.sh && trap "stop_redis_servers; stop_servers" EXIT && start_servers && start_redis_servers && go run ./scripts/mutation $(if $(MUTANTS),-only $(MUTANTS)) $(if $(SIM),-sim)'

# Refreshes the pictures of the docs: docs/img/checkout.png, from the demo's
# browser test (needs Chromium), and docs/img/metrics.png, Prometheus's graph
# of the demo during a storm (needs Chromium and Debian's prometheus). Tests
# alone never write into the tree.
pictures:
	cd demo/payments && IDEMKIT_PICTURES=$(CURDIR)/docs/img go test -count=1 -run '^TestCheckoutInBrowser$$' .
	cd docs/examples && IDEMKIT_PICTURES=$(CURDIR)/docs/img go test -count=1 -run '^TestPrometheusScrapesTheDemo$$' .

# Checks the Prometheus rules of observability/prometheus with promtool
# (Debian's prometheus package): they parse, and their unit tests pass.
# make test runs it too, and docs/examples checks them against the code.
rules:
	bash observability/prometheus/check

# A short fuzz run of every fuzz target (FUZZTIME=30s by default).
fuzz:
	bash scripts/fuzz-all
