package idemhttp_test

import (
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/idemkit/idemkit/internal/costfloor"
)

// BenchmarkFloor measures a first request through the middleware with
// parts of idemkit taken out (see internal/costfloor), beside the handler
// alone: what is left when nothing is stored and nothing is hashed is the
// floor that no store or fingerprint design can go below.
//
//	GOMAXPROCS=1 go test -run XXX -bench Floor -benchmem ./core/idemhttp/
func BenchmarkFloor(b *testing.B) {
	b.Run("HandlerAlone", func(b *testing.B) { firstRequests(b, createCharge) })
	for _, a := range append([]costfloor.Ablation{costfloor.None}, costfloor.Ablations...) {
		name := string(a)
		if a == costfloor.None {
			name = "memory-store"
		}
		b.Run(name, func(b *testing.B) {
			s := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
			defer s.Close()
			e := idem.New(a.Apply(idem.Config{Store: s, Logger: slog.New(slog.DiscardHandler)}))
			firstRequests(b, idemhttp.Middleware(e)(createCharge))
		})
	}
}

// firstRequests sends h a request with a new key each time.
func firstRequests(b *testing.B, h http.Handler) {
	w := benchkit.NewWriter()
	var key []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key = append(key[:0], `"bench-`...)
		key = strconv.AppendInt(key, int64(i), 10)
		key = append(key, '"')
		w.Reset()
		benchkit.Serve(h, key, w)
		if w.Status != http.StatusCreated {
			b.Fatalf("status %d", w.Status)
		}
	}
}
