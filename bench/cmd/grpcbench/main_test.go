package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestMain makes the test binary a server child when grpcbench starts it
// as one (os.Executable is the test binary here).
func TestMain(m *testing.M) {
	if mode := os.Getenv(serveEnv); mode != "" {
		if err := serve(mode == "guarded"); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestEveryCaseRuns measures each case briefly, in process and on
// loopback through a server child: every call must succeed. It times
// nothing.
func TestEveryCaseRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range cases {
		if f := inProcess(c.guarded, c.replay, 10*time.Millisecond); f.perCall <= 0 {
			t.Errorf("in process, %s: %+v", c.name, f)
		}
		f, err := loopback(ctx, c.guarded, c.replay, 20*time.Millisecond, 2)
		if err != nil || f.perCall <= 0 || f.p99 < f.p50 {
			t.Errorf("loopback, %s: %+v, %v", c.name, f, err)
		}
	}
}
