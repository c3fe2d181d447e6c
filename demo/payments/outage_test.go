package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

// dbProxy forwards TCP connections to a database server until it is cut:
// then it closes every connection and refuses new ones, as a database
// whose network went away, until it is restored on the same address.
type dbProxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func newDBProxy(t *testing.T, target string) *dbProxy {
	t.Helper()
	p := &dbProxy{target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *dbProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
}

// cut closes the listener and every connection.
func (p *dbProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore listens again on the same address.
func (p *dbProxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

// post sends a charge from a goroutine other than the test's.
func (d *demo) post(account, key, body string) (reply, error) {
	req, err := http.NewRequest(http.MethodPost, d.url+"/v1/charges", strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+account)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}, err
}

// TestDatabaseOutageDuringACharge: when the database goes away while a
// charge runs (here while the payment provider works, after idemkit took
// the key), the charge answers 503 with Retry-After, not 500: nothing was
// written, and the retry with the same key, once the database is back,
// makes the charge, with the provider's one authorization.
func TestDatabaseOutageDuringACharge(t *testing.T) {
	for name, dsn := range databases(t) {
		t.Run(name, func(t *testing.T) {
			var proxy *dbProxy
			if name != "sqlite" {
				u, err := url.Parse(dsn)
				if err != nil {
					t.Fatal(err)
				}
				proxy = newDBProxy(t, u.Host)
				u.Host = proxy.addr
				dsn = u.String()
			}
			cfg := app.DefaultConfig()
			// The provider answers within the lease, which the renewals
			// failing during the outage do not lose.
			cfg.DB, cfg.ProviderLatency, cfg.Lease = dsn, time.Second, 3*time.Second
			d := start(t, cfg)
			acct, key := newAccount(), newKey()

			answered := make(chan reply, 1)
			failed := make(chan error, 1)
			go func() {
				r, err := d.post(acct, key, chargeBody)
				if err != nil {
					failed <- err
					return
				}
				answered <- r
			}()
			// The provider counts the call as soon as it gets it, then
			// takes its latency to answer: the outage starts in between.
			for deadline := time.Now().Add(10 * time.Second); d.app.Provider.Counts(acct).Calls == 0; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the charge never reached the provider")
				}
			}
			if proxy != nil {
				proxy.cut()
			} else {
				// SQLite has no network: the database goes away as the
				// process's handle on it closes.
				sqlDB, err := d.app.DB.DB()
				if err != nil {
					t.Fatal(err)
				}
				sqlDB.Close()
			}
			var r reply
			select {
			case r = <-answered:
			case err := <-failed:
				t.Fatal(err)
			}
			r.problem(t, 503, "database-unavailable")
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
				t.Fatalf("Retry-After %q, want a number of seconds", r.header.Get("Retry-After"))
			}
			if proxy == nil {
				return // this database does not come back
			}

			proxy.restore(t)
			// The key may stay held until the lease of the attempt that
			// met the outage runs out: 409 until then.
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				r, err := d.post(acct, key, chargeBody)
				if err != nil {
					t.Fatal(err)
				}
				if r.status == 201 {
					if r.replayed() {
						t.Fatalf("the retry was a replay of a charge the outage interrupted: %s", r.body)
					}
					break
				}
				if (r.status != 409 && r.status != 503) || time.Now().After(deadline) {
					t.Fatalf("retry after the outage: %d %s", r.status, r.body)
				}
			}
			if p, b := d.provider(t, acct), d.balance(t, acct); p["authorizations"] != 1.0 || b["charges"] != 1.0 {
				t.Fatalf("provider %v, balance %v: want 1 authorization for 1 charge", p, b)
			}
		})
	}
}
