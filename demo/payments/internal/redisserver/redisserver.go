// Package redisserver starts a redis-server of its own, on a free
// loopback port and in a directory of its own, for the storm and the
// tests that kill, restart or empty Redis on purpose.
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server started by Start, with the durability the
// Redis store's README asks for: an append-only file, fsynced every
// second. It can be killed and started again on the same port and files,
// or emptied.
type Server struct {
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	// exited is closed when the running process has been waited for.
	exited chan struct{}
}

// ErrNotInstalled: there is no redis-server to start.
var ErrNotInstalled = errors.New("redis-server is not installed: install the Debian package redis-server (scripts/redis-servers.sh does, as root)")

// Start starts a redis-server and waits until it answers.
func Start(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNotInstalled
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "storm-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, port: port}
	if err := s.Restart(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Restart runs redis-server on the server's port and files, and waits
// until it answers PING: after a Kill, once it has loaded its append-only
// file.
func (s *Server) Restart(ctx context.Context) error {
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
		"--logfile", filepath.Join(s.dir, "server.log"), "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := client.Ping(pctx).Err()
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil, time.Now().After(deadline):
			s.Kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.Addr(), err, log)
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("redis-server on %s exited at start:\n%s", s.Addr(), log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill ends the server with SIGKILL, as a crash would: it writes nothing
// more, and what it had written to its append-only file stays there.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// FlushAll deletes every key, as a Redis that lost its data would.
func (s *Server) FlushAll(ctx context.Context) error {
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	return client.FlushAll(ctx).Err()
}

// Stop kills the server and removes its files.
func (s *Server) Stop() {
	s.Kill()
	os.RemoveAll(s.dir)
}
