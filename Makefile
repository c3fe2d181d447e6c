# Every target works from a fresh clone; see README.md.
.PHONY: test demo bench bench-quick bench-full fuzz

# Runs gofmt, go vet and go test -race over every module in go.work,
# starting the database servers the store tests need.
test:
	bash scripts/test-all

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

# A short fuzz run of every fuzz target (FUZZTIME=30s by default).
fuzz:
	bash scripts/fuzz-all
