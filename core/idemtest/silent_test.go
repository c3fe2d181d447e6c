package idemtest_test

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemtest"
)

// TestSilentServer: a connection is accepted, written to, and never
// answered: a read ends with its deadline.
func TestSilentServer(t *testing.T) {
	c, err := net.Dial("tcp", idemtest.SilentServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the deadline", n, err)
	}
}
