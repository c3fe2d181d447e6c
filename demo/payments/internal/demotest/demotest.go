// Package demotest runs the demo in a test's own process, on a loopback
// port, for the tests of the demo's commands and its end-to-end tests.
package demotest

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

// Start opens the demo with cfg (its Addr is ignored), logging to log,
// serves it on a free loopback port until tb ends, and returns it with its
// base URL. At the end it shuts the server down, failing tb if shutting
// down or serving failed, and closes the demo.
func Start(tb testing.TB, cfg app.Config, log *slog.Logger) (*app.App, string) {
	tb.Helper()
	cfg.Addr = "127.0.0.1:0"
	a, err := app.Open(context.Background(), cfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		a.Close()
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Server.Serve(ln) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Server.Shutdown(ctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			tb.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return a, "http://" + ln.Addr().String()
}
