package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/stream"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// shiftedClock is the in-process demo's clock (app.Config.Now): the
// system's, moved on by what the storm says.
type shiftedClock struct{ by atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.by.Load())) }

// move moves the clock d on.
func (c *shiftedClock) move(d time.Duration) { c.by.Add(int64(d)) }

// redelivery is what the storm did once the demo's clock was past its TTL.
type redelivery struct {
	// Moved is how far the clock was moved, past TTL.
	Moved, TTL time.Duration
	// Events counts the events delivered again, Webhooks the webhook
	// requests that took (retries and duplicates included), Entries the
	// entries of the stream when its group was destroyed, and Regrouped
	// those the consumer group, made anew from 0, read again.
	Events, Webhooks, Entries, Regrouped int64
	// Existing counts the deliveries answered with the ledger entry
	// already written for their charge or refund: the ledger's own doing,
	// their records having expired.
	Existing int64
}

// redeliverAfterTTL moves the in-process demo's clock past its TTL, so
// that every idempotency record has expired, and has every settlement
// event of the account delivered again, as a provider that retries for
// longer than the TTL (a Standard Webhooks sender, for about 27 hours)
// and a stream read anew from its start would: each event as a signed
// webhook through the proxy (signed by the moved clock), and with the
// stream, the consumer group destroyed, so that the demo's consumer makes
// it again from 0 and reads every entry again. It waits until all of it
// is done with (quiesce).
func (rep *Report) redeliverAfterTTL(ctx context.Context, demo *app.App, clock *shiftedClock, px *proxy, account string) error {
	r := &rep.Redelivery
	r.TTL = demo.Engine.Config().TTL
	r.Moved = r.TTL + time.Hour
	events, err := payments.AccountEvents(ctx, demo.DB, account)
	if err != nil {
		return fmt.Errorf("the events to deliver again: %w", err)
	}
	existing, deliveries := demo.API.Existing.Load(), demo.Provider.Counts(account).Deliveries
	var read int64
	clock.move(r.Moved)
	px.resume()
	defer px.drain()
	r.Events = int64(len(events))
	if demo.Webhooks != nil {
		msgs := make([]webhook.Message, len(events))
		for i, e := range events {
			msgs[i] = webhook.Message{ID: e.ID, Body: e.Body(), Account: e.Data.Account}
		}
		demo.Webhooks.Send(ctx, msgs)
	}
	if s := demo.Stream; s != nil {
		read = s.Read.Load()
		if r.Entries, err = s.Client.XLen(ctx, s.Key).Result(); err != nil {
			return fmt.Errorf("the stream's length: %w", err)
		}
		if err := s.Client.XGroupDestroy(ctx, s.Key, s.Group).Err(); err != nil {
			return fmt.Errorf("destroy the consumer group: %w", err)
		}
	}
	if demo.Webhooks == nil && demo.Stream == nil {
		return errors.New("the in-process demo has neither webhooks nor a stream to deliver the events again")
	}
	if err := rep.quiesce(ctx, demo); err != nil {
		return fmt.Errorf("delivering every event again after the TTL: %w", err)
	}
	r.Webhooks = demo.Provider.Counts(account).Deliveries - deliveries
	if s := demo.Stream; s != nil {
		r.Regrouped = s.Read.Load() - read
	}
	r.Existing = demo.API.Existing.Load() - existing
	return nil
}

// streamDrained waits until s's group has read every entry and
// acknowledged them all, or ctx ends; it returns the entries left
// pending.
func streamDrained(ctx context.Context, s *stream.Stream) (pending int64, err error) {
	for {
		drained, pending, err := s.Drained(ctx)
		if err == nil && drained {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return pending, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
