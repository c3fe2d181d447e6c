package idemtest

import (
	"net"
	"sync"
	"testing"
)

// SilentServer listens on a free loopback port and returns its address:
// it accepts every connection and never reads nor answers, as a server
// stopped with SIGSTOP looks to its clients (the kernel completes the
// handshake, the process never replies). Point a store's client at it to
// see that every call ends with its deadline, connecting included. It
// closes the listener and the connections when tb ends.
func SilentServer(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
