package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/stream"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// The event stream's key and consumer group in the Events Redis.
const (
	EventStream = "payments:events"
	EventGroup  = "payments"
)

// CheckEvents reports why events, the value of Config.Events, names no
// Redis the demo can keep its event stream in, or nil.
func CheckEvents(events string) error {
	if events == "" {
		return nil
	}
	return checkRedisURL("-events must be empty or", events)
}

// CheckWebhookSecret reports why secret, the value of
// Config.WebhookSecret, is no Standard Webhooks secret, or nil.
func CheckWebhookSecret(secret string) error {
	if secret == "" {
		return nil
	}
	if _, err := webhook.ParseSecret(secret); err != nil {
		return fmt.Errorf("-webhook-secret: %w", err)
	}
	return nil
}

// openEvents returns the event stream of cfg.Events, nil without. It does
// not contact Redis: a Redis that is down is waited for by the consumer
// and the provider, who try again.
func openEvents(cfg Config) (*stream.Stream, error) {
	if cfg.Events == "" {
		return nil, nil
	}
	opt, err := redis.ParseURL(cfg.Events)
	if err != nil {
		return nil, fmt.Errorf("-events: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1
	key := cfg.EventStream
	if key == "" {
		key = EventStream
	}
	return &stream.Stream{Client: redis.NewClient(opt), Key: key, Group: EventGroup}, nil
}

// StartEvents starts the provider's settlement events: every
// SettleEvery, the provider sends the events of the charges and refunds
// not yet settled (payments.PendingEvents, Provider.Due) as signed
// webhooks to webhookURL (with the Config's Webhooks) and to the event
// stream (with its Events), whose entries this instance then consumes
// (API.ConsumeEvent). It returns a function that stops them all and
// waits; deliveries under way are dropped, and sent again by the next
// start of any instance, as the events stay pending until applied.
func (a *App) StartEvents(webhookURL string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	if a.cfg.Webhooks && a.cfg.SettleEvery > 0 {
		a.Webhooks = &webhook.Sender{URL: webhookURL, Secret: a.API.WebhookSecret, DuplicateRate: a.cfg.WebhookDuplicateRate,
			AttemptTimeout: a.cfg.WebhookTimeout, Workers: a.cfg.WebhookWorkers, Now: a.API.Now, Log: a.log,
			Delivered: func(m webhook.Message) { a.Provider.Delivered(m.Account) }}
		a.Webhooks.Start(ctx)
	}
	if a.Stream != nil {
		wg.Go(func() {
			a.Stream.Consume(ctx, func(ctx context.Context, e stream.Event) bool {
				return a.API.ConsumeEvent(ctx, e.ID, e.Body)
			})
		})
	}
	if a.cfg.SettleEvery > 0 {
		wg.Go(func() { a.settle(ctx) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// settle runs the provider's settlement every SettleEvery until ctx ends.
func (a *App) settle(ctx context.Context) {
	t := time.NewTicker(a.cfg.SettleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pending, partial, err := payments.PendingEvents(ctx, a.DB)
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("settlement run: cannot read the charges and refunds to settle", "error", err.Error())
			}
			continue
		}
		due := a.Provider.Due(pending, partial)
		if len(due) == 0 {
			continue
		}
		if a.Webhooks != nil {
			msgs := make([]webhook.Message, len(due))
			for i, e := range due {
				msgs[i] = webhook.Message{ID: e.ID, Body: e.Body(), Account: e.Data.Account}
			}
			a.Webhooks.Send(ctx, msgs)
		}
		if a.Stream != nil {
			entries := make([]stream.Event, len(due))
			for i, e := range due {
				entries[i] = stream.Event{ID: e.ID, Body: e.Body()}
			}
			if err := a.Stream.Publish(ctx, entries); err != nil {
				if ctx.Err() == nil {
					a.log.Warn("settlement run: cannot add the events to the stream: they are sent again later", "error", err.Error(), "events", len(due))
				}
				continue
			}
			for _, e := range due {
				a.Provider.Delivered(e.Data.Account)
			}
		}
	}
}
