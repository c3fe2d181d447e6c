// Package flaky is the demo's "flaky network" fault mode, for the checkout
// page: a request that asks for it has its attempts of a payment fail the
// ways a mobile network fails them, on the server's side, so that it works
// in any browser and nothing has to be installed between the browser and
// the demo.
//
// A POST under /v1 with an Idempotency-Key and the header
//
//	Demo-Network: flaky
//
// is numbered among the requests with the same Authorization and key (the
// attempts of one payment), and the attempts fail in a fixed order that
// shows every answer a retrying client meets:
//
//   - attempt 1 is held: it waits Hold (4 s) on the server while it holds
//     the key, as a slow payment provider would, then runs. A client that
//     waits less (the checkout page gives an attempt 3 s) gives up on it
//     and retries while it still runs;
//   - attempt 2 is untouched: arriving while attempt 1 is held, it gets
//     409 request-in-progress with Retry-After;
//   - attempt 3 is dropped: it runs, and its answer breaks off halfway
//     through the body (the connection closes), as when a network loses
//     an answer. The client reads a status and headers, then fails to read
//     the body: a network error. Breaking it there, rather than closing
//     the connection before any byte, keeps browsers and Go's client from
//     resending the request on their own, which they may do when a
//     connection they reused closes without a byte;
//   - later attempts are untouched: they get the payment's answer, replayed.
//
// Requests without the header are never touched, and none at all unless
// the operator turned fault injection on (the demo's -fault-injection):
// otherwise the demo has no Network (nil), and the header is ignored. A held or dropped
// request runs to its end even though its client has gone, as it would if
// the network, not the client, had lost the exchange.
package flaky

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header and Value ask for the fault mode.
const (
	Header = "Demo-Network"
	Value  = "flaky"
)

// Hold is how long attempt 1 is held.
const Hold = 4 * time.Second

// Fault is what happens to one request.
type Fault int

// The faults, in the order a payment's attempts meet them.
const (
	None Fault = iota
	// Held waits Hold, holding the request's key, before the handler runs.
	Held
	// Dropped runs, and its response is not sent.
	Dropped
)

func (f Fault) String() string {
	switch f {
	case Held:
		return "held"
	case Dropped:
		return "dropped"
	}
	return "none"
}

// Limits of the attempt counts kept: a payment's attempts come within
// minutes, and the page's visitors are few.
const (
	maxPayments = 10_000
	forgetAfter = 10 * time.Minute
)

// Network decides and applies the faults. Use New; a nil *Network injects
// no fault.
type Network struct {
	log  *slog.Logger
	hold time.Duration
	now  func() time.Time

	mu      sync.Mutex
	seen    map[[sha256.Size]byte]*payment
	arrival []*payment // oldest first, to forget
}

type payment struct {
	id       [sha256.Size]byte
	attempts int
	first    time.Time
}

// New returns a Network that logs the faults it injects to log.
func New(log *slog.Logger) *Network {
	return &Network{log: log, hold: Hold, now: time.Now, seen: map[[sha256.Size]byte]*payment{}}
}

// Plan returns the fault for a request, counting it among its payment's
// attempts if it asked for the fault mode.
func (n *Network) Plan(method, path, header, authorization, key string) Fault {
	if n == nil || method != http.MethodPost || !strings.HasPrefix(path, "/v1/") || key == "" ||
		!strings.EqualFold(strings.TrimSpace(header), Value) {
		return None
	}
	// Hashed: the counts need not keep anyone's token or key.
	h := sha256.New()
	h.Write([]byte(authorization))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var id [sha256.Size]byte
	h.Sum(id[:0])

	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	n.forget(now)
	p := n.seen[id]
	if p == nil {
		p = &payment{id: id, first: now}
		n.seen[id] = p
		n.arrival = append(n.arrival, p)
	}
	p.attempts++
	switch p.attempts {
	case 1:
		return Held
	case 3:
		return Dropped
	}
	return None
}

// forget drops the payments first seen too long ago, and the oldest
// beyond the bound.
func (n *Network) forget(now time.Time) {
	k := 0
	for k < len(n.arrival) && (now.Sub(n.arrival[k].first) >= forgetAfter || len(n.arrival)-k >= maxPayments) {
		delete(n.seen, n.arrival[k].id)
		k++
	}
	if k > 0 {
		clear(n.arrival[:k])
		n.arrival = n.arrival[k:]
	}
}

type faultKey struct{}

// WithFault returns ctx carrying f, for the handler wrapped by HoldHandler.
// The context no longer ends when the client goes: the request runs on.
func WithFault(ctx context.Context, f Fault) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), faultKey{}, f)
}

// FaultOf returns the fault ctx carries.
func FaultOf(ctx context.Context) Fault {
	f, _ := ctx.Value(faultKey{}).(Fault)
	return f
}

// HoldHandler waits Hold before it runs next for a Held request. Mount it
// where the request holds its idempotency key (inside idemkit's
// middleware), so that the payment's next attempt finds the key taken.
func (n *Network) HoldHandler(next http.Handler) http.Handler {
	if n == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if FaultOf(r.Context()) == Held {
			n.log.InfoContext(r.Context(), "flaky network: attempt held", slog.Duration("hold", n.hold))
			t := time.NewTimer(n.hold)
			select {
			case <-t.C:
			case <-r.Context().Done(): // the key was lost: the handler finds out
				t.Stop()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// Middleware applies the fault mode to a net/http server: it marks a
// faulted request's context for HoldHandler, and drops the response of a
// Dropped one. Mount it outermost.
func (n *Network) Middleware(next http.Handler) http.Handler {
	if n == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := n.Plan(r.Method, r.URL.Path, r.Header.Get(Header), r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"))
		if f == None {
			next.ServeHTTP(w, r)
			return
		}
		r = r.WithContext(WithFault(r.Context(), f))
		if f != Dropped {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			// Closes the connection without a response; net/http logs nothing.
			panic(http.ErrAbortHandler)
		}
		n.Drop(r.Context(), conn, rec.status, rec.header, rec.body.Bytes())
	})
}

// Drop breaks off the answer of a Dropped request on conn: its status
// line, its header with the body's length, and the first half of the
// body, then the connection closes.
func (n *Network) Drop(ctx context.Context, conn net.Conn, status int, header http.Header, body []byte) {
	n.log.InfoContext(ctx, "flaky network: response broken off", slog.Int("status", status))
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", status, http.StatusText(status))
	header = header.Clone()
	header.Del("Transfer-Encoding")
	// One byte more than the body, so that even an empty body breaks off.
	header.Set("Content-Length", strconv.Itoa(len(body)+1))
	header.Write(&b)
	b.WriteString("\r\n")
	b.Write(body[:len(body)/2])
	conn.Write(b.Bytes())
	conn.Close()
}

// recorder is a ResponseWriter that keeps the answer for Drop.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}
