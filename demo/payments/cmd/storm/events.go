package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

// refund refunds half of each of the first o.Refunds charges, through the
// proxy with the storm's retrying client, then straight at the server
// those whose client gave up. It returns the refunds made: their amount
// by id.
func (rep *Report) refund(ctx context.Context, o Options, client, direct *http.Client, pxURL, backend, auth string,
	charges []charge, rows []chargeRow, seen *answers) (map[string]int64, []request, error) {
	byDesc := make(map[string]chargeRow, len(rows))
	for _, r := range rows {
		byDesc[r.Description] = r
	}
	type refundReq struct {
		key    string
		body   []byte
		amount int64
	}
	var reqs []refundReq
	for i := range min(o.Refunds, len(charges)) {
		row, ok := byDesc[charges[i].description]
		if !ok {
			continue // a charge lost: the run fails for it already
		}
		amount := max(row.Amount/2, 1)
		reqs = append(reqs, refundReq{key: idemclient.NewKey(), amount: amount,
			body: fmt.Appendf(nil, `{"charge":%q,"amount":%d}`, row.ID, amount)})
		rep.ExpectedRefunds.Refunds++
		rep.ExpectedRefunds.Refunded += amount
	}
	rep.Refunds = len(reqs)
	ids := make([]string, len(reqs))
	sent := sendAll(ctx, o, "refunds", len(reqs), func(i int) (idemclient.Result, string) {
		res, failure, answer := postJSON(ctx, client, pxURL+"/v1/refunds", auth, reqs[i].key, reqs[i].body, nil)
		ids[i] = idOf(answer)
		return res, failure
	})
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("storm did not finish within %s: %w", o.Timeout, err)
	}
	for _, i := range sent.unsettled {
		res, failure, answer := postJSON(ctx, direct, backend+"/v1/refunds", auth, reqs[i].key, reqs[i].body, seen)
		if failure != "" {
			return nil, nil, fmt.Errorf("refund %d could not be settled even without faults: %s after %d attempts", i, failure, res.Attempts)
		}
		ids[i] = idOf(answer)
	}
	made := make(map[string]int64, len(reqs))
	sentAgain := make([]request, len(reqs))
	for i, id := range ids {
		made[id] = reqs[i].amount
		sentAgain[i] = request{path: "/v1/refunds", key: reqs[i].key, body: reqs[i].body}
	}
	return made, sentAgain, nil
}

// idOf is the id of the object a 201 answered with.
func idOf(answer []byte) string {
	var v struct {
		ID string `json:"id"`
	}
	json.Unmarshal(answer, &v)
	return v.ID
}

// settledBalance is what GET /v1/balance says of the account.
type settledBalance struct {
	Charged         int64 `json:"charged"`
	Charges         int64 `json:"charges"`
	Refunded        int64 `json:"refunded"`
	Refunds         int64 `json:"refunds"`
	SettledCharged  int64 `json:"settled_charged"`
	SettledRefunded int64 `json:"settled_refunded"`
	Settlements     int64 `json:"settlements"`
}

// settled reports whether the balance shows as many ledger entries as
// charges and refunds, with their money.
func (b settledBalance) settled() bool {
	return b.Settlements >= b.Charges+b.Refunds && b.SettledCharged >= b.Charged && b.SettledRefunded >= b.Refunded
}

// awaitSettlement waits until the account's balance shows every charge
// and refund settled, for at most o.SettleTimeout: what is not settled by
// then is lost, and checkLedger says so.
func (rep *Report) awaitSettlement(ctx context.Context, o Options, backend, auth string) error {
	start := time.Now()
	defer func() { rep.Events.Waited = time.Since(start) }()
	for deadline := start.Add(o.SettleTimeout); ; {
		var b settledBalance
		if err := getJSON(ctx, backend+"/v1/balance", auth, &b); err != nil {
			return err
		}
		if b.settled() || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("storm did not finish within %s: %w", o.Timeout, ctx.Err())
		}
	}
}

// quiesce waits until the in-process demo has nothing under way that
// could apply an event late: its webhooks delivered or dropped, and its
// stream's entries all read and acknowledged (for at most a minute, after
// which it says what is left). A -target is given a second.
func (rep *Report) quiesce(ctx context.Context, demo *app.App) error {
	if demo == nil {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if demo.Webhooks != nil {
		idle := make(chan struct{})
		go func() { demo.Webhooks.Idle(); close(idle) }()
		select {
		case <-idle:
		case <-ctx.Done():
			return errors.New("webhooks still under way a minute on")
		}
	}
	if s := demo.Stream; s != nil {
		pending, err := streamDrained(ctx, s)
		rep.Events.Unacked = pending
		if err != nil {
			return fmt.Errorf("the event stream not read and acknowledged whole a minute on (%d entries pending): %w", pending, err)
		}
	}
	return nil
}

// ledgerEntry is an entry as GET /v1/settlements lists it.
type ledgerEntry struct {
	ID      int64  `json:"id"`
	Settles string `json:"settles"`
	Amount  int64  `json:"amount"`
}

// checkLedger holds every charge found and refund made against the
// ledger entries of the account: exactly one each, with its amount.
func (rep *Report) checkLedger(ctx context.Context, backend, auth string, rows []chargeRow, made map[string]int64) error {
	expected := make(map[string]int64, len(rows)+len(made))
	for _, r := range rows {
		expected[r.ID] = r.Amount
	}
	for id, amount := range made {
		expected[id] = amount
	}
	var entries []ledgerEntry
	for after := int64(0); ; {
		var page struct {
			Data    []ledgerEntry `json:"data"`
			HasMore bool          `json:"has_more"`
		}
		if err := getJSON(ctx, backend+"/v1/settlements?limit=100&starting_after="+strconv.FormatInt(after, 10), auth, &page); err != nil {
			return err
		}
		entries = append(entries, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}
	e := &rep.Events
	e.Expected = int64(len(expected))
	per := map[string]int{}
	for _, s := range entries {
		e.Applied++
		if amount, ok := expected[s.Settles]; !ok || amount != s.Amount {
			e.Mismatched++
		}
		per[s.Settles]++
	}
	for id := range expected {
		switch n := per[id]; {
		case n == 0:
			e.Lost++
		case n > 1:
			e.Twice += int64(n - 1)
		}
	}
	var b settledBalance
	if err := getJSON(ctx, backend+"/v1/balance", auth, &b); err != nil {
		return err
	}
	rep.FoundRefunds = refunds{Refunded: b.Refunded, Refunds: b.Refunds}
	return nil
}
