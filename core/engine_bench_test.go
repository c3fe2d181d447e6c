package idem_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// Engine costs without any HTTP stack: what every adapter pays.
//
//	go test -run XXX -bench Engine -benchmem ./core/

var benchPayload = []byte(`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234 for two items"}`)
var benchResponse = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1999,"currency":"usd","customer":"cus_8f3a","status":"succeeded","created":"2026-11-22T13:21:41Z"}`)

func benchEngine(b *testing.B) *idem.Engine {
	s := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
	b.Cleanup(func() { s.Close() })
	return idem.New(idem.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
}

func benchRequest(key string) exchange.Request {
	return exchange.Request{Method: http.MethodPost, Path: "/v1/charges", KeyLines: []string{key},
		ContentType: "application/json", Body: benchPayload}
}

var benchHeader = http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/charges/ch_1"}}

func BenchmarkEngineFirstRequest(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	keys := make([]string, 0, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1024 == 0 { // keys made in batches, outside the measured path's allocations as far as possible
			keys = keys[:0]
			for j := range 1024 {
				keys = append(keys, `"k-`+strconv.Itoa(i+j)+`"`)
			}
		}
		r := benchRequest(keys[i%1024])
		d := e.Adapter().Begin(ctx, r)
		if d.Lock == nil {
			b.Fatal("no lock")
		}
		d.Lock.Write(benchResponse)
		d.Lock.Finish(ctx, 201, benchHeader)
	}
}

func BenchmarkEngineReplay(b *testing.B) {
	e := benchEngine(b)
	ctx := context.Background()
	r := benchRequest(`"k"`)
	d := e.Adapter().Begin(ctx, r)
	d.Lock.Write(benchResponse)
	d.Lock.Finish(ctx, 201, benchHeader)
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest(`"k"`)
		if d := e.Adapter().Begin(ctx, r); !d.Replayed {
			b.Fatal("no replay")
		}
	}
}

func BenchmarkDefaultFingerprint(b *testing.B) {
	r := benchRequest(`"k"`)
	b.ReportAllocs()
	for b.Loop() {
		idem.DefaultFingerprint(r)
	}
}
