// Package httpwire is the load generator's HTTP/1.1 on the wire: requests
// built once as bytes, with the idempotency key patched in place, and a
// minimal response reader that frames bodies by Content-Length or chunked
// encoding and discards them. net/http's client allocates and schedules
// more per request than the servers it would measure; this costs almost
// nothing, so what the benchmark sees is the server.
package httpwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Response is what the generator keeps of a response. ReadResponse fills it
// in place so that reading allocates nothing.
type Response struct {
	// Status is the status code of the final (non-1xx) response.
	Status int
	// BodyLen is the number of body bytes read (chunked: the decoded size).
	BodyLen int64
	// Close is set when the server announced it closes the connection.
	Close bool
	// Replayed is set when the response carries Idempotent-Replayed: true.
	Replayed bool
}

// Errors of malformed responses. They wrap ErrMalformed.
var (
	ErrMalformed = errors.New("httpwire: malformed response")
	// ErrNoLength is returned for a response that has a body but neither
	// Content-Length nor chunked encoding: it would end at connection close,
	// which a keep-alive load generator cannot use.
	ErrNoLength = fmt.Errorf("%w: body without Content-Length or chunked encoding", ErrMalformed)
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// ReadResponse reads one response from br into r, skipping interim 1xx
// responses, and discards its body. br's buffer must hold the longest
// status or header line (bufio's default 4 KiB is plenty for the servers
// measured); a longer line is an error, not a truncation. A connection that
// ends cleanly before the first byte of a response gives io.EOF; one that
// ends inside a response gives io.ErrUnexpectedEOF.
func ReadResponse(br *bufio.Reader, r *Response) error {
	for first := true; ; first = false {
		*r = Response{}
		if err := readHead(br, r, first); err != nil {
			return err
		}
		if r.Status >= 200 || r.Status == 101 {
			return nil
		}
		// 100 Continue, 103 Early Hints: the real response follows.
	}
}

type framing struct {
	length  int64 // -1: none given
	chunked bool
}

func readHead(br *bufio.Reader, r *Response, first bool) error {
	line, err := readLine(br)
	if err != nil {
		if first && err == io.EOF {
			return io.EOF
		}
		return unexpected(err)
	}
	status, err := parseStatusLine(line)
	if err != nil {
		return err
	}
	r.Status = status
	f := framing{length: -1}
	for {
		line, err := readLine(br)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			break
		}
		if err := header(line, r, &f); err != nil {
			return err
		}
	}
	if status < 200 || status == 204 || status == 304 {
		return nil // no body, whatever the headers say (RFC 9112, 6.3)
	}
	switch {
	case f.chunked:
		n, err := discardChunked(br)
		r.BodyLen = n
		return err
	case f.length >= 0:
		n, err := br.Discard(int(f.length))
		r.BodyLen = int64(n)
		if err != nil {
			return unexpected(err)
		}
		return nil
	default:
		return ErrNoLength
	}
}

// readLine returns the next line without its CRLF (or bare LF). The slice
// aliases br's buffer until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, malformed("line longer than %d bytes", br.Size())
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseStatusLine parses "HTTP/1.x NNN reason".
func parseStatusLine(line []byte) (int, error) {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return 0, malformed("status line %q", line)
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, malformed("status code in %q", line)
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return 0, malformed("status code in %q", line)
	}
	return code, nil
}

func header(line []byte, r *Response, f *framing) error {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return malformed("header line %q", line)
	}
	name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		n, ok := parseDecimal(value)
		if !ok {
			return malformed("Content-Length %q", value)
		}
		if f.length >= 0 && f.length != n {
			return malformed("conflicting Content-Length values")
		}
		f.length = n
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		// Chunked must be the last coding; anything else cannot be framed.
		last := value
		if i := bytes.LastIndexByte(value, ','); i >= 0 {
			last = bytes.TrimSpace(value[i+1:])
		}
		if !bytes.EqualFold(last, []byte("chunked")) {
			return malformed("Transfer-Encoding %q", value)
		}
		f.chunked = true
	case bytes.EqualFold(name, []byte("Connection")):
		if containsToken(value, "close") {
			r.Close = true
		}
	case bytes.EqualFold(name, []byte("Idempotent-Replayed")):
		r.Replayed = bytes.EqualFold(value, []byte("true"))
	}
	return nil
}

func containsToken(list []byte, token string) bool {
	for len(list) > 0 {
		var item []byte
		item, list, _ = bytes.Cut(list, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(token)) {
			return true
		}
	}
	return false
}

// parseDecimal parses a non-negative decimal of at most 18 digits.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// discardChunked reads a chunked body and its trailers, returning the
// decoded size.
func discardChunked(br *bufio.Reader) (int64, error) {
	var total int64
	for {
		line, err := readLine(br)
		if err != nil {
			return total, unexpected(err)
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		size, ok := parseHex(bytes.TrimSpace(line))
		if !ok {
			return total, malformed("chunk size %q", line)
		}
		if size == 0 {
			for { // trailer fields, up to the empty line
				line, err := readLine(br)
				if err != nil {
					return total, unexpected(err)
				}
				if len(line) == 0 {
					return total, nil
				}
			}
		}
		n, err := br.Discard(int(size))
		total += int64(n)
		if err != nil {
			return total, unexpected(err)
		}
		crlf, err := readLine(br)
		if err != nil {
			return total, unexpected(err)
		}
		if len(crlf) != 0 {
			return total, malformed("chunk of %d bytes not followed by CRLF", size)
		}
	}
}

// parseHex parses a chunk size of at most 15 hex digits.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}
