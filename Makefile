# Every target works from a fresh clone; see README.md.
.PHONY: test test-quick demo bench bench-quick bench-full fuzz pictures

# Runs gofmt, go vet and go test -race over every module in go.work,
# starting the database servers the store tests need.
test:
	bash scripts/test-all

# gofmt, go vet and go test -short of every module: no servers, no
# browser, nothing installed; the tests that need a server are skipped.
test-quick:
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt would change:" >&2; echo "$$unformatted" >&2; exit 1; fi
	@failed=""; \
	for dir in $$(go list -m -f '{{.Dir}}'); do \
	  echo "== module $$dir"; \
	  (cd "$$dir" && go vet ./... && go test -short -count=1 ./...) || failed="$$failed $$dir"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed" >&2; exit 1; fi

demo:
	go run ./demo/payments

bench:
	go test -run XXX -bench . -benchmem ./core/...

# Load benchmarks (bench/): bench-quick takes under 5 minutes, for routine
# use; bench-full takes about 25 minutes on an idle machine and regenerates
# docs/benchmarks.md and its chart.
BENCH_OUT ?= $(or $(TMPDIR),/tmp)/idemkit-bench

bench-quick:
	go run ./bench/cmd/loadbench -quick -out $(BENCH_OUT)/benchmarks.md -chart $(BENCH_OUT)/benchmarks.svg

bench-full:
	go run ./bench/cmd/loadbench -out docs/benchmarks.md -chart docs/img/benchmarks.svg -json $(BENCH_OUT)/benchmarks.json

# Refreshes the pictures of the docs: docs/img/checkout.png, from the demo's
# browser test (needs Chromium). Tests alone never write into the tree.
pictures:
	cd demo/payments && IDEMKIT_PICTURES=$(CURDIR)/docs/img go test -count=1 -run '^TestCheckoutInBrowser$$' .

# A short fuzz run of every fuzz target (FUZZTIME=30s by default).
fuzz:
	bash scripts/fuzz-all
