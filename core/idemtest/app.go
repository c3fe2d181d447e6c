package idemtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// app is the plain net/http application the HTTP suite mounts behind each
// adapter. It counts how often its handlers really run.
type app struct {
	calls     atomic.Int64
	panicking atomic.Bool
	entered   chan struct{} // one send per /slow request that started
	release   chan struct{} // closed to let /slow requests finish
	closeOnce sync.Once
}

func newApp() *app {
	return &app{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

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
		chunk := []byte(fmt.Sprintf("call %d;", n))
		for written := 0; written < size; written += len(chunk) {
			w.Write(chunk[:min(len(chunk), size-written)])
		}
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
