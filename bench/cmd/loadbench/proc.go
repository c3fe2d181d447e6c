package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// child is the parent's handle on a child process of this binary.
type child struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *tail
	mu     sync.Mutex // one command at a time
	addr   string
}

// startChild runs this binary with args and GOMAXPROCS=1, and reads its
// first reply (a serving child's address; nothing for others: first=nil).
func startChild(ctx context.Context, name string, args []string, first any) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	c := &child{name: name, cmd: cmd, stderr: &tail{max: 16 << 10}}
	cmd.Stderr = c.stderr
	if c.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.out = bufio.NewScanner(stdout)
	c.out.Buffer(make([]byte, 64<<10), 1<<20)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if first != nil {
		if err := c.read(first); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// call sends one command and decodes its reply into v (nil: ignore it).
func (c *child) call(v any, format string, args ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		return c.fail(err)
	}
	return c.read(v)
}

func (c *child) read(v any) error {
	if !c.out.Scan() {
		err := c.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return c.fail(err)
	}
	line := c.out.Bytes()
	var e struct{ Error string }
	if json.Unmarshal(line, &e) == nil && e.Error != "" {
		return fmt.Errorf("%s: %s", c.name, e.Error)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(line, v); err != nil {
		return c.fail(fmt.Errorf("reply %q: %w", line, err))
	}
	return nil
}

func (c *child) fail(err error) error {
	msg := strings.TrimSpace(c.stderr.String())
	if msg != "" {
		return fmt.Errorf("%s: %w; its stderr ends with:\n%s", c.name, err, msg)
	}
	return fmt.Errorf("%s: %w", c.name, err)
}

// next reads the next reply without sending a command (in-process results).
func (c *child) next(v any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.read(v)
}

// stop closes the child's stdin, which ends it, and waits a little for it
// before killing it.
func (c *child) stop() error {
	c.in.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		return <-done
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
