package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// The loop every adapter runs, here around a plain function rather than a
// framework's handler: Begin decides; only a Run decision runs the
// handler, under the Lock, and Finish records what it answered.
func ExampleEngine_Begin() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	charges := 0
	serve := func(key, body string) {
		ctx := context.Background()
		req := &exchange.Request{
			Method:        http.MethodPost,
			Path:          "/v1/charges",
			ContentType:   "application/json",
			Body:          []byte(body),
			ContentLength: int64(len(body)),
		}
		if key != "" {
			req.KeyLines = []string{key}
		}
		d := engine.Adapter().Begin(ctx, *req)
		switch d.Action {
		case exchange.Pass:
			fmt.Println("pass: run the handler, record nothing")
		case exchange.Respond:
			fmt.Printf("respond %d (replayed %v): %s\n", d.Response.Status, d.Replayed, d.Response.Body)
		case exchange.Run:
			// The handler runs with d.Lock.Context() and its body is
			// copied into the Lock as it is written.
			charges++
			fmt.Fprintf(d.Lock, `{"id":"ch_%d"}`, charges)
			header := http.Header{"Content-Type": {"application/json"}}
			if f := d.Lock.Finish(ctx, http.StatusCreated, header); f.Outcome != exchange.Recorded {
				fmt.Println("not recorded:", f.Outcome, f.Reason, f.Err)
			}
			fmt.Println("ran the handler, charge", charges)
		}
	}

	serve(`"c-1"`, `{"amount":1999}`)
	serve(`"c-1"`, `{ "amount": 1999 }`) // a retry: the same JSON
	serve(`"c-1"`, `{"amount":500}`)     // the key reused for another charge
	fmt.Println("charges made:", charges)
	// Output:
	// ran the handler, charge 1
	// respond 201 (replayed true): {"id":"ch_1"}
	// respond 422 (replayed false): {"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"This Idempotency-Key was already used with a different request (method, path or body)."}
	// charges made: 1
}

func ExampleParseKey() {
	for _, value := range []string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, // an RFC 9651 string, as the draft defines the field
		`8e03978e-40d5-43e8-bc93-6894a57f9324`,   // bare: accepted unless strict
		`"order \"7\"";v=1`,                      // escapes decoded, parameters ignored
		`"unterminated`,
	} {
		key, err := idem.ParseKey([]string{value}, false)
		if err != nil {
			fmt.Println("error:", err, errors.Is(err, idem.ErrKeyInvalid))
			continue
		}
		fmt.Println("key:", key)
	}
	_, err := idem.ParseKey([]string{`8e03978e-40d5-43e8-bc93-6894a57f9324`}, true)
	fmt.Println("strict:", err)
	_, err = idem.ParseKey(nil, false)
	fmt.Println("no header:", errors.Is(err, idem.ErrKeyMissing))
	// Output:
	// key: 8e03978e-40d5-43e8-bc93-6894a57f9324
	// key: 8e03978e-40d5-43e8-bc93-6894a57f9324
	// key: order "7"
	// error: idempotency key invalid: unterminated string true
	// strict: idempotency key invalid: key is not a quoted string
	// no header: true
}

func ExampleDefaultFingerprint() {
	charge := func(path, body string) idem.Fingerprint {
		return idem.DefaultFingerprint(exchange.Request{
			Method: http.MethodPost, Path: path, ContentType: "application/json", Body: []byte(body),
		})
	}
	a := charge("/v1/charges", `{"amount":1999,"currency":"usd"}`)
	fmt.Println("members reordered:", a == charge("/v1/charges", `{ "currency": "usd", "amount": 1999 }`))
	fmt.Println("another amount:   ", a == charge("/v1/charges", `{"amount":2000,"currency":"usd"}`))
	fmt.Println("another path:     ", a == charge("/v1/refunds", `{"amount":1999,"currency":"usd"}`))
	// Output:
	// members reordered: true
	// another amount:    false
	// another path:      false
}

// A handler passes the key it holds downstream, for instance as a payment
// provider's own idempotency key, scoped by tenant so that two accounts'
// keys never meet there either.
func ExampleHeldKey() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held, ok := idem.HeldKey(r.Context())
		fmt.Println("held:", ok, "scope:", held.ID.Scope, "key:", held.ID.Key)
		fmt.Println("provider key:", held.ID.Scope+"/"+held.ID.Key)
		w.WriteHeader(http.StatusCreated)
	})
	account := idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Account") })
	h := idemhttp.Middleware(engine, account)(charge)

	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1999}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"c-1"`)
	req.Header.Set("X-Account", "acct_1")
	h.ServeHTTP(httptest.NewRecorder(), req)

	_, ok := idem.HeldKey(context.Background())
	fmt.Println("outside a guarded handler:", ok)
	// Output:
	// held: true scope: acct_1 key: c-1
	// provider key: acct_1/c-1
	// outside a guarded handler: false
}

// Problem type URIs name a page that explains the error to your API's
// clients: point ProblemBase at your own documentation.
func ExampleConfig_problemBase() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store, ProblemBase: "https://docs.example.com/errors/idempotency#"})

	h := idemhttp.Middleware(engine)(http.NotFoundHandler())
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req) // no Idempotency-Key
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(rec.Header().Get("Link"))
	fmt.Println(rec.Body.String())
	// Output:
	// 400 application/problem+json
	// <https://docs.example.com/errors/idempotency#key-missing>; rel="describedby"; type="text/html"
	// {"type":"https://docs.example.com/errors/idempotency#key-missing","title":"Idempotency-Key header missing","status":400,"detail":"This request requires an Idempotency-Key header."}
}
