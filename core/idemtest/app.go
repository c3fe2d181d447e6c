package idemtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// app is the plain net/http application the HTTP suite mounts behind each
// adapter. It counts how often its handlers really run.
type app struct {
	calls     atomic.Int64
	panicking atomic.Bool
	entered   chan struct{} // one send per /slow or /ctx request that started
	release   chan struct{} // closed to let /slow and /ctx requests finish
	closeOnce sync.Once
	midBody   chan struct{} // one send per /big?pause=1 request that wrote its first part
	resume    chan struct{} // one receive lets such a request write the rest
	bigDone   chan struct{} // one send per /big?pause=1 request that wrote everything
}

func newApp() *app {
	return &app{entered: make(chan struct{}, 100), release: make(chan struct{}),
		midBody: make(chan struct{}, 10), resume: make(chan struct{}, 10), bigDone: make(chan struct{}, 10)}
}

// bigPart is what /big writes per call, and before pausing with pause=1.
const bigPart = 64 << 10

// bigBody is the body /big writes for call n: a repeated pattern, so that a
// body cut short, or another call's, is told apart from the whole.
func bigBody(n int64, size int) []byte {
	chunk := []byte(fmt.Sprintf("call %d;", n))
	body := make([]byte, 0, size)
	for len(body) < size {
		body = append(body, chunk[:min(len(chunk), size-len(body))]...)
	}
	return body
}

// unwrapOnly is a ResponseWriter that reaches the one below it only
// through Unwrap: no Flush or Hijack of its own.
type unwrapOnly struct{ w http.ResponseWriter }

func (u unwrapOnly) Header() http.Header         { return u.w.Header() }
func (u unwrapOnly) Write(p []byte) (int, error) { return u.w.Write(p) }
func (u unwrapOnly) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.w }

func (a *app) releaseSlow() { a.closeOnce.Do(func() { close(a.release) }) }

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := a.calls.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	switch r.URL.Path {
	case "/status":
		code, _ := strconv.Atoi(q.Get("code"))
		if q.Get("bare") == "1" { // neither a Content-Type nor a body
			w.WriteHeader(code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		if code != http.StatusNoContent && code != http.StatusNotModified {
			fmt.Fprintf(w, "status %d, call %d", code, n)
		}
		return
	case "/panic":
		if a.panicking.Load() {
			panic("idemtest: handler panic")
		}
	case "/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: part 1 of call %d\n\n", n)
		http.NewResponseController(w).Flush()
		fmt.Fprintf(w, "data: part 2 of call %d\n\n", n)
		return
	case "/big":
		size, _ := strconv.Atoi(q.Get("size"))
		w.Header().Set("Content-Type", "application/octet-stream")
		body := bigBody(n, size)
		pause := q.Get("pause") == "1"
		for len(body) > 0 {
			part := body[:min(len(body), bigPart)]
			body = body[len(part):]
			// Like most handlers, it writes on when a write fails.
			w.Write(part)
			if pause && len(body) > 0 {
				pause = false
				a.midBody <- struct{}{}
				select {
				case <-a.resume:
				case <-a.release:
				}
			}
		}
		if q.Get("pause") == "1" {
			select {
			case a.bigDone <- struct{}{}:
			default:
			}
		}
		return
	case "/hijack":
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, "cannot hijack: "+err.Error(), http.StatusInternalServerError)
			return
		}
		body := fmt.Sprintf("hijacked by call %d", n)
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		buf.Flush()
		conn.Close()
		return
	case "/switch":
		// A final 101 with nothing after it: the connection is no longer
		// HTTP, whatever follows.
		w.WriteHeader(http.StatusSwitchingProtocols)
		return
	case "/hints":
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d}`, n)
		return
	case "/unwrap-flush":
		// The flush goes through a writer that offers only Unwrap, as many
		// middleware writers do: http.ResponseController finds the flusher
		// below it.
		uw := unwrapOnly{w}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(uw, "data: part 1 of call %d\n\n", n)
		if err := http.NewResponseController(uw).Flush(); err != nil {
			http.Error(w, "cannot flush: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(uw, "data: part 2 of call %d\n\n", n)
		return
	case "/late-header":
		// Headers set after WriteHeader: net/http never sends them.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Early", "sent")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Late", "set after the header")
		w.Header().Set("Content-Type", "text/plain; changed=after-the-header")
		w.Header()["X-Early"][0] = "changed in place after the header"
		fmt.Fprintf(w, `{"call":%d}`, n)
		return
	case "/links":
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Add("Link", fmt.Sprintf("</charges/ch_%d>; rel=self", n))
		h.Add("Link", "</charges>; rel=collection")
		h.Add("Cache-Control", "no-store")
		h.Add("Cache-Control", fmt.Sprintf("private, max-age=%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"call":%d}`, n)
		return
	case "/held":
		held, ok := idem.HeldKey(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"held":%t,"scope":%q,"key":%q,"token":%q}`, ok, held.ID.Scope, held.ID.Key, held.Token)
		return
	case "/ctx":
		// Waits for its context to end and answers why.
		a.entered <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-a.release:
		case <-time.After(20 * time.Second):
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "cause: %v", context.Cause(r.Context()))
		return
	case "/slow":
		a.entered <- struct{}{}
		select {
		case <-a.release:
		case <-time.After(20 * time.Second):
		}
	}
	sum := sha256.Sum256(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", fmt.Sprintf("/charges/ch_%d", n))
	h.Set("Set-Cookie", fmt.Sprintf("session=s%d; HttpOnly", n))
	h.Set("X-Extra", fmt.Sprintf("extra-%d", n))
	status := http.StatusCreated
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"call":%d,"method":%q,"path":%q,"body_len":%d,"body_sha256":%q}`,
		n, r.Method, r.URL.RequestURI(), len(body), hex.EncodeToString(sum[:8]))
}
