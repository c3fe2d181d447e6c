package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/idemkit/idemkit/demo/payments/internal/nodetest"
)

// nodeClient is the folder of the Node.js gRPC client: client.js, its
// charges.proto, and the package.json and package-lock.json that pin
// @grpc/grpc-js and @grpc/proto-loader.
const nodeClient = "testdata/grpc-node"

// TestGRPCNodeClient: a client no one here wrote, @grpc/grpc-js from npm,
// with a newer .proto than the demo's (the request is a Struct on the wire
// plus a map and an Any the demo does not know), makes charges over the
// demo's gRPC listener through a proxy that drops the replies of some
// calls after the demo recorded them. It retries each charge with the one
// key it made for it, building the request anew for every attempt with
// its map entries in another order, so that the bytes differ. Every
// charge is taken once, and every retry of a dropped reply is answered
// with the recorded charge, replayed.
func TestGRPCNodeClient(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Node.js client's packages come from npm; the full run installs them")
	}
	node := nodetest.Tool(t, "node")
	modules := nodetest.Modules(t, nodeClient, "grpc-node")

	d := serveGRPC(t, nil)
	// The first reply of every three is dropped, and the one after it too
	// every nine: a retry's reply is lost as well now and then.
	proxy := startReplyDropper(t, d.grpc, func(call int64) bool { return call%3 == 1 || call%9 == 2 })
	const operations = 40
	prefix := newAccount() + "_"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeClient, "client.js"), proxy.addr, strconv.Itoa(operations), prefix)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	type attempt struct {
		Op, Attempt   int
		Key, Account  string
		Request       string
		Code          codes.Code
		Error, Charge string
		Replayed      bool
	}
	ops := map[int][]attempt{}
	total := 0
	for sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes())); sc.Scan(); total++ {
		var a attempt
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("the client printed %q: %v", sc.Bytes(), err)
		}
		ops[a.Op] = append(ops[a.Op], a)
	}
	if runErr != nil {
		t.Fatalf("node client.js: %v\n%s\n%s", runErr, stdout.Bytes(), stderr.Bytes())
	}

	var retried, failed int
	for op := 1; op <= operations; op++ {
		as := ops[op]
		if len(as) == 0 {
			t.Fatalf("operation %d made no attempt", op)
		}
		last := as[len(as)-1]
		sent := map[string]bool{}
		for i, a := range as {
			if a.Key != as[0].Key || a.Account != as[0].Account || a.Attempt != i+1 {
				t.Fatalf("operation %d: attempt %+v after %+v: want one key and account, attempts in order", op, a, as[0])
			}
			if sent[a.Request] {
				t.Fatalf("operation %d: attempt %d sent the bytes of an earlier attempt: the test would not exercise the canonical fingerprint", op, a.Attempt)
			}
			sent[a.Request] = true
			if i < len(as)-1 {
				failed++
				// grpc-js reports a connection that broke under a call as
				// UNAVAILABLE, or now and then as CANCELLED.
				if a.Code != codes.Unavailable && a.Code != codes.Canceled {
					t.Fatalf("operation %d, attempt %d: %v %q, want UNAVAILABLE, the connection dropped", op, a.Attempt, a.Code, a.Error)
				}
			}
		}
		if last.Code != codes.OK {
			t.Fatalf("operation %d ended with %v %q", op, last.Code, last.Error)
		}
		if len(as) > 1 {
			retried++
		}
		// A retry gets the recorded charge, replayed; a first attempt runs.
		if last.Replayed != (len(as) > 1) {
			t.Fatalf("operation %d: attempt %d of %d answered with replayed %v", op, last.Attempt, len(as), last.Replayed)
		}
		// The operation's account holds one charge, the one every answer
		// named, and the provider took the money once.
		r := d.do(t, http.MethodGet, "/v1/charges", last.Account, "", "")
		var list struct{ Data []map[string]any }
		if err := json.Unmarshal(r.body, &list); r.status != 200 || err != nil {
			t.Fatalf("GET /v1/charges: %d %s", r.status, r.body)
		}
		if len(list.Data) != 1 || list.Data[0]["id"] != last.Charge || list.Data[0]["amount"] != float64(1000+op) {
			t.Fatalf("operation %d (%d attempts) answered %s; its account holds %v", op, len(as), last.Charge, list.Data)
		}
		if p := d.provider(t, last.Account); p["calls"] != float64(1) || p["authorizations"] != float64(1) {
			t.Fatalf("operation %d (%d attempts): provider %v, want one call and one authorization", op, len(as), p)
		}
	}
	if len(ops) != operations {
		t.Fatalf("the client reported %d operations, want %d", len(ops), operations)
	}
	calls, dropped := proxy.calls.Load(), proxy.dropped.Load()
	if dropped != int64(failed) || calls != int64(total) {
		t.Fatalf("the proxy saw %d replies and dropped %d; the client made %d attempts, %d of them failed", calls, dropped, total, failed)
	}
	if dropped < operations/3 {
		t.Fatalf("only %d replies were dropped", dropped)
	}
	t.Logf("%d operations, %d attempts, %d replies dropped, %d operations retried and replayed, %d charges",
		operations, total, dropped, retried, operations)
}

// replyDropper is a TCP proxy in front of an HTTP/2 server that drops the
// replies of chosen calls. It forwards the client's bytes as they come,
// and the server's frame by frame, until the server begins its reply to a
// call that drop chooses (calls numbered from 1 in the order their replies
// begin): the first HEADERS frame of a stream, which a gRPC server sends
// once its handler has returned, and so once idemkit has recorded the
// outcome. It then closes both connections without forwarding the frame:
// the client sees its connection drop with its call unanswered.
type replyDropper struct {
	addr           string
	backend        string
	drop           func(call int64) bool
	calls, dropped atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func startReplyDropper(t *testing.T, backend string, drop func(call int64) bool) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{addr: ln.Addr().String(), backend: backend, drop: drop, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.relay(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// track notes c, to be closed when the test ends.
func (p *replyDropper) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = true
}

func (p *replyDropper) relay(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(client)
	p.track(server)
	p.wg.Go(func() {
		_, _ = io.Copy(server, client)
		server.Close()
	})
	started := map[uint32]bool{} // the streams whose reply has begun
	var header [9]byte
	for {
		if _, err := io.ReadFull(server, header[:]); err != nil {
			return
		}
		length := int(header[0])<<16 | int(header[1])<<8 | int(header[2])
		typ, stream := header[3], (uint32(header[5])<<24|uint32(header[6])<<16|uint32(header[7])<<8|uint32(header[8]))&(1<<31-1)
		payload := make([]byte, length)
		if _, err := io.ReadFull(server, payload); err != nil {
			return
		}
		const headersFrame = 0x1
		if typ == headersFrame && stream != 0 && !started[stream] {
			started[stream] = true
			if p.drop(p.calls.Add(1)) {
				p.dropped.Add(1)
				return
			}
		}
		frame := net.Buffers{header[:], payload}
		if _, err := frame.WriteTo(client); err != nil {
			return
		}
	}
}
