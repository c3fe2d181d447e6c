package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Faults are the probabilities, each 0..1, that the proxy breaks a request.
type Faults struct {
	Reset    float64 // reset the client's connection before forwarding: the server never sees the request
	Drop     float64 // forward, let the server finish, then reset the connection: the answer is lost
	Delay    float64 // hold the request for DelayFor before forwarding
	DelayFor time.Duration
}

// faultCounts tallies what the proxy did.
type faultCounts struct {
	forwarded, resets, drops, delays atomic.Int64
}

// proxy forwards requests to backend, injecting faults at random.
type proxy struct {
	backend string
	faults  Faults
	client  *http.Client
	counts  faultCounts
}

func newProxy(backend string, f Faults) *proxy {
	return &proxy{
		backend: backend,
		faults:  f,
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute},
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	roll := rand.Float64()
	switch {
	case roll < p.faults.Reset:
		p.counts.resets.Add(1)
		reset(w)
		return
	case roll < p.faults.Reset+p.faults.Delay:
		p.counts.delays.Add(1)
		time.Sleep(p.faults.DelayFor)
	}
	drop := roll >= p.faults.Reset+p.faults.Delay && roll < p.faults.Reset+p.faults.Delay+p.faults.Drop

	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.backend+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.counts.forwarded.Add(1)
	if err != nil || drop {
		// The server has done its work; the client never hears of it.
		p.counts.drops.Add(1)
		reset(w)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(respBody)
}

// reset closes the client's connection abruptly (TCP RST).
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	conn.Close()
}
