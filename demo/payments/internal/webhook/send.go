package webhook

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Message is one event to deliver.
type Message struct {
	ID   string // the webhook-id: the same on every delivery
	Body []byte
	// Account is whose event it is, for Sender.Delivered.
	Account string
}

// Sender delivers messages as signed webhooks, as a provider keeping to
// at-least-once delivery does: each delivery is retried after a network
// error, a timeout, a 5xx, 408, 409, 425 or 429 (after Retry-After when
// the receiver gives one), with backoff, each attempt signed anew; some
// are sent twice at once on purpose (DuplicateRate); and the messages of a
// batch go out in random order, several at a time. A delivery that runs
// out of attempts is dropped: the provider sends the event again later
// (payments.Provider.Due), as real providers keep trying for days. Use it
// by pointer, with Start before Send.
type Sender struct {
	URL    string
	Secret Secret
	// DuplicateRate is the probability 0..1 that a delivery is sent twice
	// at once.
	DuplicateRate float64
	// MaxAttempts bounds the attempts of one delivery (default 8), and
	// AttemptTimeout each attempt (default 5 s).
	MaxAttempts    int
	AttemptTimeout time.Duration
	// Workers is how many deliveries run at once (default 8).
	Workers int
	// Now is the clock the webhooks are signed by (default time.Now).
	Now func() time.Time
	// Delivered, if set, is called for every request sent.
	Delivered func(Message)
	Log       *slog.Logger

	client  *http.Client
	queue   chan Message
	working sync.WaitGroup // workers
	pending sync.WaitGroup // messages queued or under way

	mu   sync.Mutex
	busy map[string]int // copies of each message queued or under way
}

// Start starts the workers; they stop when ctx ends, dropping what is
// queued (the provider sends it again).
func (s *Sender) Start(ctx context.Context) {
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = 8
	}
	if s.AttemptTimeout <= 0 {
		s.AttemptTimeout = 5 * time.Second
	}
	if s.Workers <= 0 {
		s.Workers = 8
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: s.Workers * 2}, Timeout: s.AttemptTimeout}
	s.queue = make(chan Message, 1024)
	for range s.Workers {
		s.working.Go(func() {
			for {
				select {
				case m := <-s.queue:
					s.deliver(ctx, m)
					s.done(m.ID)
					s.pending.Done()
				case <-ctx.Done():
					return
				}
			}
		})
	}
	context.AfterFunc(ctx, func() {
		s.working.Wait()
		s.client.CloseIdleConnections()
		// What the workers left in the queue is dropped.
		for {
			select {
			case m := <-s.queue:
				s.done(m.ID)
				s.pending.Done()
			default:
				return
			}
		}
	})
}

// Send queues msgs for delivery in random order, and those drawn by
// DuplicateRate twice; a message already queued or under way is left to
// that delivery, as a provider does not send an event again while it is
// still trying to. It waits while the queue is full, until ctx ends.
func (s *Sender) Send(ctx context.Context, msgs []Message) {
	order := rand.Perm(len(msgs))
	for _, i := range order {
		copies := 1
		if s.DuplicateRate > 0 && rand.Float64() < s.DuplicateRate {
			copies = 2
		}
		if !s.take(msgs[i].ID, copies) {
			continue
		}
		for range copies {
			if ctx.Err() != nil {
				return
			}
			s.pending.Add(1)
			select {
			case s.queue <- msgs[i]:
			case <-ctx.Done():
				s.pending.Done()
				return
			}
		}
	}
}

// take marks copies of message id as under way, unless some already are.
func (s *Sender) take(id string, copies int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] > 0 {
		return false
	}
	if s.busy == nil {
		s.busy = map[string]int{}
	}
	s.busy[id] = copies
	return true
}

// done marks one copy of message id as delivered or dropped.
func (s *Sender) done(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id]--; s.busy[id] <= 0 {
		delete(s.busy, id)
	}
}

// Idle waits until every message sent has been delivered or dropped.
func (s *Sender) Idle() { s.pending.Wait() }

// deliver sends m until the receiver takes it, answers that it never
// will, or the attempts run out.
func (s *Sender) deliver(ctx context.Context, m Message) {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		status, retryAfter, err := s.post(ctx, m)
		switch {
		case err == nil && status < 300:
			return
		case err == nil && !retryable(status):
			s.Log.Warn("webhook refused: not sent again", "webhook_id", m.ID, "status", status)
			return
		case attempt >= s.MaxAttempts:
			s.Log.Warn("webhook not delivered: the provider sends the event again later", "webhook_id", m.ID,
				"attempts", attempt, "status", status, "error", errString(err))
			return
		}
		pause := rand.N(wait) + time.Millisecond // full jitter
		if retryAfter > pause {
			pause = retryAfter
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// post makes one attempt, signed now.
func (s *Sender) post(ctx context.Context, m Message) (status int, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(m.Body))
	if err != nil {
		return 0, 0, err
	}
	now := s.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderID, m.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, s.Secret.Sign(m.ID, now, m.Body))
	if s.Delivered != nil {
		s.Delivered(m)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		retryAfter = min(time.Duration(secs)*time.Second, 5*time.Second)
	}
	return resp.StatusCode, retryAfter, nil
}

// retryable reports whether an answer says the same delivery may succeed
// later: the statuses the idempotency policy does not record.
func retryable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return status >= 500
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
