package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83"
)

// TestStripeGoSDK drives stripe-go, with its own generated keys and
// MaxNetworkRetries 3, through the storm's flaky proxy against the demo:
// 300 charges and 100 refunds, on SQLite and PostgreSQL (sdkStorm).
func TestStripeGoSDK(t *testing.T) { testStripeSDK(t, stripeGo{}) }

// stripeGo drives stripe-go v83.
type stripeGo struct{}

func (stripeGo) Name() string             { return "stripe-go" }
func (stripeGo) IdempotencyError() string { return fmt.Sprintf("%T", &stripe.IdempotencyError{}) }

// Calls makes the calls with stripe-go; a transport sees each call's
// requests.
func (stripeGo) Calls(t *testing.T, base, secret string, ops []sdkOp) []sdkResult {
	sc := stripe.NewClient(secret, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(base),
		HTTPClient:        &http.Client{Timeout: time.Second, Transport: sdkTransport{http.DefaultTransport}},
		MaxNetworkRetries: stripe.Int64(3),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})))
	results := make([]sdkResult, len(ops))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	for i, op := range ops {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			seen := &seenRequests{}
			ctx := context.WithValue(t.Context(), seenKey{}, seen)
			r := sdkResult{Op: op.Op, N: op.N}
			var err error
			if op.Op == "charge" {
				p := &stripe.ChargeCreateParams{Amount: stripe.Int64(op.Amount), Currency: stripe.String("usd"),
					Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}, Description: stripe.String("order " + strconv.Itoa(op.N))}
				p.AddMetadata("order", strconv.Itoa(op.N))
				if op.Key != "" {
					p.IdempotencyKey = stripe.String(op.Key)
				}
				var ch *stripe.Charge
				if ch, err = sc.V1Charges.Create(ctx, p); err == nil {
					r.ID, r.Amount, r.Replayed = ch.ID, ch.Amount, ch.LastResponse.Header.Get("Idempotent-Replayed") == "true"
				}
			} else {
				p := &stripe.RefundCreateParams{Charge: stripe.String(op.Charge), Amount: stripe.Int64(op.Amount)}
				if op.Key != "" {
					p.IdempotencyKey = stripe.String(op.Key)
				}
				var ref *stripe.Refund
				if ref, err = sc.V1Refunds.Create(ctx, p); err == nil {
					r.ID, r.Amount, r.Replayed = ref.ID, ref.Amount, ref.LastResponse.Header.Get("Idempotent-Replayed") == "true"
					if ref.Charge != nil {
						r.Charge = ref.Charge.ID
					}
				}
			}
			if err != nil {
				r.Error = stripeGoError(err)
			}
			seen.mu.Lock()
			r.Attempts, r.Keys = seen.requests, seen.keys
			seen.mu.Unlock()
			results[i] = r
		})
	}
	wg.Wait()
	return results
}

// stripeGoError is what stripe-go reported: a *stripe.Error, whose Err
// is its typed error (*stripe.IdempotencyError, …), for an answer; any
// other error for a call that got none.
func stripeGoError(err error) *sdkError {
	var se *stripe.Error
	if errors.As(err, &se) {
		class := fmt.Sprintf("%T", err)
		if se.Err != nil {
			class = fmt.Sprintf("%T", se.Err)
		}
		return &sdkError{Class: class, Type: string(se.Type), Code: string(se.Code), Status: se.HTTPStatusCode, Message: se.Msg}
	}
	return &sdkError{Class: fmt.Sprintf("%T", err), Message: err.Error()}
}

// seenRequests is what the transport saw of one call: its requests (the
// first and the SDK's own retries) and the idempotency keys they carried.
type seenRequests struct {
	mu       sync.Mutex
	requests int
	keys     []string
}

type seenKey struct{}

// sdkTransport notes each request of a call.
type sdkTransport struct{ base http.RoundTripper }

func (s sdkTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c, _ := r.Context().Value(seenKey{}).(*seenRequests); c != nil {
		c.mu.Lock()
		c.requests++
		if key := r.Header.Get("Idempotency-Key"); len(c.keys) == 0 || c.keys[0] != key {
			c.keys = append(c.keys, key)
		}
		c.mu.Unlock()
	}
	return s.base.RoundTrip(r)
}
