// Package stream carries the payment provider's events on a Redis stream
// read by a consumer group, as a fleet of demo instances consumes them:
// each instance adds the events its simulated provider sends (XADD), and
// reads the group's share of them (XREADGROUP), acknowledging each entry
// (XACK) once it is applied or can never be. An entry stays pending with
// its consumer until then; one left pending longer than ClaimAfter (its
// consumer died, or could not apply it yet) is claimed by whichever
// consumer comes next (XAUTOCLAIM) and delivered again. So every entry is
// delivered at least once, and some more than once: the consumer's
// idempotency (Engine.Do, keyed by the event id) makes each event apply
// once.
package stream

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is an entry of the stream: an event's id and its body.
type Event struct {
	ID   string
	Body []byte
}

// Stream is one instance's end of the stream: it publishes and consumes.
type Stream struct {
	Client *redis.Client
	// Key is the stream's key, and Group the consumer group every
	// instance reads it in.
	Key   string
	Group string
	// Consumer names this instance in the group (default: NewConsumerName).
	Consumer string
	// MaxLen keeps about that many entries (default 100,000): an entry
	// trimmed before it was applied is not lost, as the provider sends
	// every event not yet applied again.
	MaxLen int64
	// ClaimAfter is how long an entry stays pending with its consumer
	// before another may claim it (default 30 s): longer than a consumer
	// takes to apply a batch, so that live consumers keep their entries.
	ClaimAfter time.Duration
	// Batch is how many entries one read takes (default 50).
	Batch int64
	Log   *slog.Logger

	// Counts of what this instance did.
	Published, Read, Claimed, Acked atomic.Int64

	once sync.Once // sets the defaults, before the first Publish or Consume
}

// NewConsumerName names a consumer after this process: its host, its pid
// and a random part, so that a restarted process never takes over the
// pending entries of its former self but lets XAUTOCLAIM hand them on.
func NewConsumerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strings.ToLower(rand.Text()[:6]))
}

func (s *Stream) defaults() { s.once.Do(s.setDefaults) }

func (s *Stream) setDefaults() {
	if s.Consumer == "" {
		s.Consumer = NewConsumerName()
	}
	if s.MaxLen <= 0 {
		s.MaxLen = 100_000
	}
	if s.ClaimAfter <= 0 {
		s.ClaimAfter = 30 * time.Second
	}
	if s.Batch <= 0 {
		s.Batch = 50
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
}

// Publish adds events to the stream, in one round trip.
func (s *Stream) Publish(ctx context.Context, events []Event) error {
	s.defaults()
	if len(events) == 0 {
		return nil
	}
	pipe := s.Client.Pipeline()
	for _, e := range events {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.Key, MaxLen: s.MaxLen, Approx: true,
			Values: []any{"id", e.ID, "body", e.Body}})
	}
	_, err := pipe.Exec(ctx)
	if err == nil {
		s.Published.Add(int64(len(events)))
	}
	return err
}

// Apply applies one event; ack reports whether its entry is done with:
// applied, or refused for good. Without ack the entry stays pending and
// is delivered again after ClaimAfter.
type Apply func(ctx context.Context, e Event) (ack bool)

// Consume reads the group's entries and applies them, batch by batch,
// until ctx ends. Each batch begins with the entries left pending longer
// than ClaimAfter, claimed from whichever consumer held them, then new
// entries; its entries are acknowledged together once the batch is done,
// so a consumer that dies midway leaves the whole batch pending, applied
// entries included, for another to claim. A Redis that is down or lost
// the group is waited for, and the group made again.
func (s *Stream) Consume(ctx context.Context, apply Apply) {
	s.defaults()
	ready := false
	cursor := "0-0"
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		if !ready {
			err := s.Client.XGroupCreateMkStream(ctx, s.Key, s.Group, "0").Err()
			if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
				s.pause(ctx, &backoff, "cannot create the consumer group", err)
				continue
			}
			ready = true
		}
		batch, next, err := s.next(ctx, cursor)
		if err != nil {
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				ready = false // Redis lost the stream or the group
			}
			s.pause(ctx, &backoff, "cannot read the event stream", err)
			continue
		}
		cursor, backoff = next, 50*time.Millisecond
		if len(batch) == 0 {
			continue
		}
		var done []string
		for _, m := range batch {
			e, ok := entry(m)
			if !ok {
				s.Log.Error("event stream entry without an id and a body: acknowledged and dropped", "entry", m.ID)
				done = append(done, m.ID)
				continue
			}
			if apply(ctx, e) {
				done = append(done, m.ID)
			}
		}
		if len(done) > 0 {
			// Acknowledged even if ctx ended meanwhile: the applications
			// happened.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := s.Client.XAck(actx, s.Key, s.Group, done...).Err()
			cancel()
			if err != nil {
				s.Log.Warn("cannot acknowledge applied events: they will be delivered again", "error", err.Error(), "entries", len(done))
			} else {
				s.Acked.Add(int64(len(done)))
			}
		}
	}
}

// Drained reports whether the group has read every entry of the stream
// and acknowledged them all: pending reports how many it holds
// unacknowledged. A stream or group that does not exist (yet, or any
// more, after Redis lost it) is not drained.
func (s *Stream) Drained(ctx context.Context) (drained bool, pending int64, err error) {
	groups, err := s.Client.XInfoGroups(ctx, s.Key).Result()
	if err != nil {
		return false, 0, err
	}
	info, err := s.Client.XInfoStream(ctx, s.Key).Result()
	if err != nil {
		return false, 0, err
	}
	for _, g := range groups {
		if g.Name == s.Group {
			return g.Pending == 0 && g.LastDeliveredID == info.LastGeneratedID, g.Pending, nil
		}
	}
	return false, 0, nil
}

// next returns the next batch: entries claimed from the pending list
// from cursor on, else new entries, waiting a little for them.
func (s *Stream) next(ctx context.Context, cursor string) ([]redis.XMessage, string, error) {
	claimed, next, err := s.Client.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s.Key, Group: s.Group,
		Consumer: s.Consumer, MinIdle: s.ClaimAfter, Start: cursor, Count: s.Batch}).Result()
	if err != nil {
		return nil, cursor, err
	}
	if len(claimed) > 0 {
		s.Claimed.Add(int64(len(claimed)))
		s.Log.Info("claimed event stream entries left pending", "entries", len(claimed), "consumer", s.Consumer)
		return claimed, next, nil
	}
	streams, err := s.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Group, Consumer: s.Consumer,
		Streams: []string{s.Key, ">"}, Count: s.Batch, Block: 500 * time.Millisecond}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, next, nil
	}
	if err != nil {
		return nil, next, err
	}
	var batch []redis.XMessage
	for _, st := range streams {
		batch = append(batch, st.Messages...)
	}
	s.Read.Add(int64(len(batch)))
	return batch, next, nil
}

func entry(m redis.XMessage) (Event, bool) {
	id, ok1 := m.Values["id"].(string)
	body, ok2 := m.Values["body"].(string)
	return Event{ID: id, Body: []byte(body)}, ok1 && ok2 && id != ""
}

// pause logs err and waits before the next try, longer each time up to a
// second.
func (s *Stream) pause(ctx context.Context, backoff *time.Duration, msg string, err error) {
	if ctx.Err() != nil {
		return
	}
	s.Log.Warn(msg+": trying again", "error", err.Error(), "in", *backoff)
	select {
	case <-time.After(*backoff):
	case <-ctx.Done():
	}
	*backoff = min(*backoff*2, time.Second)
}
