# Every target works from a fresh clone; see README.md.
.PHONY: test demo bench fuzz

# Runs gofmt, go vet and go test -race over every module in go.work,
# starting the database servers the store tests need.
test:
	bash scripts/test-all

demo:
	go run ./demo/payments

bench:
	go test -run XXX -bench . -benchmem ./core/...

# A short fuzz run of every fuzz target (FUZZTIME=30s by default).
fuzz:
	bash scripts/fuzz-all
