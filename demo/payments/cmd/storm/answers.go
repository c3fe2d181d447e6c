package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idemkit/core/idemclient"
)

// answers holds the first successful answer the server sent for each key
// (a charge's or refund's Idempotency-Key, a webhook's id), and holds
// every later one against it, byte for byte: the README promises a retry
// "the same body and Location as the first time", whether it is replayed
// from its record or runs again and finds its row, and every delivery of
// an event the same ledger entry. The proxy shows it every answer that
// passes (those it then drops or that reach a client who gave up
// included), and the storm the answers it gets straight from the server.
type answers struct {
	mu    sync.Mutex
	first map[string]firstAnswer
	counts
}

// firstAnswer is a key's first successful answer.
type firstAnswer struct {
	status   int
	location string
	body     string
}

// counts is what answers found: Keys answered, Later answers held against
// their key's first, and Changed those that differ from it, with an
// Example of one.
type counts struct {
	Keys, Later, Changed atomic.Int64
	example              atomic.Pointer[string]
}

// see holds a successful answer to key against the key's first, or keeps
// it as the first.
func (a *answers) see(key string, status int, location string, body []byte) {
	if key == "" || status < 200 || status > 299 {
		return
	}
	got := firstAnswer{status, location, string(body)}
	a.mu.Lock()
	first, seen := a.first[key]
	if !seen {
		if a.first == nil {
			a.first = map[string]firstAnswer{}
		}
		a.first[key] = got
	}
	a.mu.Unlock()
	if !seen {
		a.Keys.Add(1)
		return
	}
	a.Later.Add(1)
	if got != first {
		a.Changed.Add(1)
		ex := fmt.Sprintf("%s: first %d Location %q %s, later %d Location %q %s", key, first.status, first.location, first.body,
			got.status, got.location, got.body)
		a.example.CompareAndSwap(nil, &ex)
	}
}

// Example is one answer that differed from its key's first, or "".
func (c *counts) Example() string {
	if ex := c.example.Load(); ex != nil {
		return *ex
	}
	return ""
}

// answerCounts is what a Report says of answers.
type answerCounts struct {
	// Keys counts the keys answered, Later the answers held against their
	// key's first, Resent those of them that the storm sent again once
	// everything had settled, and Changed the answers that differ from
	// their key's first (Example is one).
	Keys, Later, Resent, Changed int64
	Example                      string
}

func (c *counts) report() answerCounts {
	return answerCounts{Keys: c.Keys.Load(), Later: c.Later.Load(), Changed: c.Changed.Load(), Example: c.Example()}
}

// request is a charge or refund the storm made: sent again once every
// charge and refund is settled, it must get its first answer back.
type request struct {
	path, key string
	body      []byte
}

// resend sends every request again straight at the server, with its key,
// o.Concurrency at a time, and holds each answer against its key's first
// in seen. By then the charges have been refunded and everything settled:
// an answer rendered from the rows as they are now would differ. It
// returns how many were answered 201.
func resend(ctx context.Context, o Options, client *http.Client, backend, auth string, reqs []request, seen *answers) (int64, error) {
	var failed atomic.Pointer[string]
	sent := sendAll(ctx, o, "resent", len(reqs), func(i int) (idemclient.Result, string) {
		r := reqs[i]
		res, failure, _ := postJSON(ctx, client, backend+r.path, auth, r.key, r.body, seen)
		if failure != "" {
			f := fmt.Sprintf("%s %s resent: %s after %d attempts", r.path, r.key, failure, res.Attempts)
			failed.CompareAndSwap(nil, &f)
		}
		return res, failure
	})
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("storm did not finish within %s: %w", o.Timeout, err)
	}
	if f := failed.Load(); f != nil {
		return 0, fmt.Errorf("a request sent again once everything had settled was not answered 201: %s", *f)
	}
	return int64(len(reqs) - len(sent.unsettled)), nil
}
