package httpwire

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func reader(s string) *bufio.Reader { return bufio.NewReaderSize(strings.NewReader(s), 256) }

func TestReadResponseFraming(t *testing.T) {
	tests := []struct {
		name string
		wire string
		want Response
	}{
		{"content-length",
			"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello",
			Response{Status: 201, BodyLen: 5}},
		{"header names in any case, value with spaces",
			"HTTP/1.1 200 OK\r\ncontent-length:   3  \r\n\r\nabc",
			Response{Status: 200, BodyLen: 3}},
		{"empty body",
			"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			Response{Status: 200}},
		{"chunked",
			"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n",
			Response{Status: 201, BodyLen: 9}},
		{"chunked with extensions, upper-case hex and trailers",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\nA;name=v\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n",
			Response{Status: 200, BodyLen: 10}},
		{"bare LF line ends",
			"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
			Response{Status: 200, BodyLen: 2}},
		{"status line without reason",
			"HTTP/1.1 204\r\n\r\n",
			Response{Status: 204}},
		{"204 and 304 have no body whatever the headers say",
			"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
			Response{Status: 304}},
		{"interim 100 Continue skipped",
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
			Response{Status: 201, BodyLen: 1}},
		{"connection close",
			"HTTP/1.1 400 Bad Request\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n",
			Response{Status: 400, Close: true}},
		{"replayed",
			"HTTP/1.1 201 Created\r\nIdempotent-Replayed: true\r\nContent-Length: 0\r\n\r\n",
			Response{Status: 201, Replayed: true}},
		{"HTTP/1.0",
			"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
			Response{Status: 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := reader(tt.wire)
			var r Response
			if err := ReadResponse(br, &r); err != nil {
				t.Fatalf("ReadResponse: %v", err)
			}
			if r != tt.want {
				t.Errorf("got %+v, want %+v", r, tt.want)
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("left %q unread: the body was not framed exactly", rest)
			}
		})
	}
}

func TestReadResponsePipelined(t *testing.T) {
	wire := "HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nabc" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" +
		"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n"
	br := reader(wire)
	var got []int
	for {
		var r Response
		err := ReadResponse(br, &r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("ReadResponse after %v: %v", got, err)
		}
		got = append(got, r.Status)
	}
	if len(got) != 3 || got[0] != 201 || got[1] != 200 || got[2] != 409 {
		t.Errorf("statuses %v, want [201 200 409]", got)
	}
}

func TestReadResponseErrors(t *testing.T) {
	tests := []struct {
		name string
		wire string
		want error
	}{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", ErrMalformed},
		{"letters in the status code", "HTTP/1.1 2x1 Created\r\n\r\n", ErrMalformed},
		{"status code below 100", "HTTP/1.1 099 Odd\r\n\r\n", ErrMalformed},
		{"header without colon", "HTTP/1.1 200 OK\r\nBroken\r\n\r\n", ErrMalformed},
		{"bad content-length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ErrMalformed},
		{"conflicting content-lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", ErrMalformed},
		{"transfer coding other than chunked last", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", ErrMalformed},
		{"no length", "HTTP/1.1 200 OK\r\n\r\nbody until close", ErrNoLength},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", ErrMalformed},
		{"chunk without CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhiX\r\n0\r\n\r\n", ErrMalformed},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", io.ErrUnexpectedEOF},
		{"headers cut short", "HTTP/1.1 200 OK\r\nContent-Len", io.ErrUnexpectedEOF},
		{"chunked cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", io.ErrUnexpectedEOF},
		{"header line longer than the buffer", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 400) + "\r\n\r\n", ErrMalformed},
		{"clean end before a response", "", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Response
			err := ReadResponse(reader(tt.wire), &r)
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFormatKey(t *testing.T) {
	dst := make([]byte, KeyLen)
	FormatKey(dst, 0xdeadbeef, 0x0102, 0xabcdef)
	if got, want := string(dst), "deadbeef-0102-0000-0000-000000abcdef"; got != want {
		t.Errorf("FormatKey = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for stream := range uint16(3) {
		for seq := range uint64(100) {
			FormatKey(dst, 7, stream, seq)
			if seen[string(dst)] {
				t.Fatalf("duplicate key %q", dst)
			}
			seen[string(dst)] = true
		}
	}
	if n := testing.AllocsPerRun(100, func() { FormatKey(dst, 1, 2, 3) }); n != 0 {
		t.Errorf("FormatKey allocates %v times", n)
	}
}

// TestRequestIsValidHTTP sends built requests through net/http's server
// parser: the bytes must be a request any server accepts, with the key and
// body the generator meant.
func TestRequestIsValidHTTP(t *testing.T) {
	body := []byte(`{"item":"book","quantity":1}`)
	req, err := NewRequest("127.0.0.1", "/orders", "Idempotency-Key", body)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, KeyLen)
	FormatKey(key, 1, 2, 3)
	req.SetKey(key)
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(req.Bytes()))))
	if err != nil {
		t.Fatalf("net/http cannot parse the request: %v", err)
	}
	got, _ := io.ReadAll(r.Body)
	if r.Method != "POST" || r.URL.Path != "/orders" || r.Header.Get("Idempotency-Key") != string(key) ||
		string(got) != string(body) || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("parsed %s %s key %q body %q", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), got)
	}

	clone := req.Clone()
	FormatKey(key, 9, 9, 9)
	clone.SetKey(key)
	if string(clone.Bytes()) == string(req.Bytes()) {
		t.Error("SetKey on a clone changed the original, or did nothing")
	}

	noKey, err := NewRequest("h", "/orders", "", body)
	if err != nil {
		t.Fatal(err)
	}
	r, err = http.ReadRequest(bufio.NewReader(strings.NewReader(string(noKey.Bytes()))))
	if err != nil || noKey.HasKey() || r.Header.Get("Idempotency-Key") != "" {
		t.Errorf("request without key: err %v, HasKey %v, header %q", err, noKey.HasKey(), r.Header.Get("Idempotency-Key"))
	}
	if _, err := NewRequest("h", "/x\r\nEvil: 1", "", nil); err == nil {
		t.Error("a path with CRLF was accepted")
	}
}

// TestReadResponseFromNetHTTP reads what a real net/http server writes,
// both framings, over a real keep-alive connection.
func TestReadResponseFromNetHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("part one,"))
			w.(http.Flusher).Flush()
			w.Write([]byte(" part two"))
			return
		}
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	conn, err := dialTest(host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	for _, c := range []struct {
		path string
		want int64
	}{{"/length", 2}, {"/chunked", 18}, {"/length", 2}} {
		req, _ := NewRequest(host, c.path, "", []byte("{}"))
		if _, err := conn.Write(req.Bytes()); err != nil {
			t.Fatal(err)
		}
		var r Response
		if err := ReadResponse(br, &r); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
		if r.Status != 201 || r.BodyLen != c.want || r.Close {
			t.Errorf("%s: %+v, want 201 with %d body bytes, kept alive", c.path, r, c.want)
		}
	}
}

func dialTest(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }
