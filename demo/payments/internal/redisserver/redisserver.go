package main

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

// redisServer is a redis-server the storm started for the in-process
// demo's records, on a free loopback port and in a directory of its own,
// with the durability the Redis store's README asks for: an append-only
// file, fsynced every second. The storm kills it and starts it again on the
// same port and files, or empties it, while the charges are sent.
type redisServer struct {
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	// exited is closed when the running process has been waited for.
	exited chan struct{}
}

// errNoRedisServer: the storm was asked for a Redis of its own and there is
// no redis-server to start.
var errNoRedisServer = errors.New("redis-server is not installed: install the Debian package redis-server (scripts/redis-servers.sh does, as root)")

// startRedis starts a redis-server and waits until it answers.
func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedisServer
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
	s := &redisServer{bin: bin, dir: dir, port: port}
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Addr is the server's host:port.
func (s *redisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the demo's -records for this server.
func (s *redisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// start runs redis-server on the server's port and files, and waits until
// it answers PING: after a restart, once it has loaded its append-only file.
func (s *redisServer) start(ctx context.Context) error {
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
			s.kill()
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

// kill ends the server with SIGKILL, as a crash would: it writes nothing
// more, and what it had written to its append-only file stays there.
func (s *redisServer) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// flushAll deletes every key: the records the demo had written are lost,
// as a Redis that lost its data would lose them.
func (s *redisServer) flushAll(ctx context.Context) error {
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer client.Close()
	return client.FlushAll(ctx).Err()
}

// stop kills the server and removes its files.
func (s *redisServer) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}
