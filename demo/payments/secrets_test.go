package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// Defect: the demo's start line printed db="postgres://…?password=…", and
// its errors quoted DSNs whole. No line it writes shows a password, given
// in any form a DSN takes.
func TestLogsShowNoPassword(t *testing.T) {
	exe := binary(t)
	for _, args := range [][]string{
		{"-db", "postgres://app:s3cretpw@127.0.0.1:1/none?connect_timeout=2"},
		{"-db", "postgres://app@127.0.0.1:1/none?connect_timeout=2&password=s3cretpw"},
		{"-db", "host=127.0.0.1 port=1 user=app password=s3cretpw dbname=none connect_timeout=2"},
		{"-db", "app:s3cretpw@tcp(127.0.0.1:1)/none?timeout=2s"},
		{"-db", "mysql://app:s3cretpw@[::1/none"},
		{"-records", "redis://:s3cretpw@127.0.0.1:notaport/0"},
		{"-records", "redis://:s3cretpw@[::1/0"},
		{"-events", "redis://:s3cretpw@127.0.0.1:notaport/0"},
	} {
		var out bytes.Buffer
		cmd := exec.Command(exe, append(args, "-addr", "127.0.0.1:0", "-provider-latency", "0")...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || strings.Contains(out.String(), "s3cretpw") || !strings.Contains(out.String(), "level=ERROR") {
			t.Errorf("payments %q: %v, want it refused, without the password:\n%s", args, err, out.String())
		}
	}

	// A database that accepts the DSN: the start line names it, without
	// its password.
	dsn := testdb.Postgres(t)
	if dsn == "" {
		t.Skip("-short: no PostgreSQL")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs logBuffer
	cmd := exec.Command(exe, "-addr", addr, "-db", dsn+"&password=s3cretpw", "-settle-every", "0")
	cmd.Dir, cmd.Stderr = t.TempDir(), &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not come up:\n%s", logs.text())
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	out := logs.text()
	if !strings.Contains(out, "payments demo listening") || !strings.Contains(out, "password=xxxxx") || strings.Contains(out, "s3cretpw") {
		t.Fatalf("the start line, with -db %s:\n%s\nwant it naming the database without its password", filepath.Base(dsn), out)
	}
}
