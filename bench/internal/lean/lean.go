// Package lean is minimal-lean: a hand-written idempotency middleware for
// net/http kept as the benchmark's floor, never as a product. It has
// idemkit's replay, 409 and 422 behaviour for one process and nothing
// else: no leases, no expiry, no events, no canonical JSON. Its store is
// pointer-free (fixed-size keys in a map to record numbers, responses in
// 64 KiB chunks of bytes per shard, never copied), so the garbage
// collector scans a pointer per chunk at most, and its
// buffers are pooled: it allocates little beyond the handler.
package lean

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"sync"
)

const (
	shards = 64
	maxKey = 64
	chunk  = 64 << 10
	// perBlock records make a block of recs.
	perBlock = 1024
)

type record struct {
	fp       [sha256.Size]byte
	done     bool
	status   uint16
	ct       uint8 // index into shard.types
	chunk    uint32
	off, len uint32
}

type shard struct {
	mu     sync.Mutex
	index  map[[maxKey]byte]uint32
	recs   [][]record // record n is recs[n/perBlock][n%perBlock]: never copied
	n      uint32
	chunks [][]byte // the responses' bodies
	types  []string // the stored responses' Content-Type values, interned
}

type buffers struct {
	in, out bytes.Buffer
	rd      body
	w       capture
}

// body is the request body read ahead, handed to the handler again.
type body struct{ bytes.Reader }

func (*body) Close() error { return nil }

var pool = sync.Pool{New: func() any { return new(buffers) }}

var replayed = []string{"true"}

// Middleware guards next: a POST needs an Idempotency-Key of at most 64
// bytes (400 otherwise), answers 409 while its key is in flight, 422 when
// the key was used with another method, path or body, and replays the
// stored status, Content-Type and body with Idempotent-Replayed: true. A
// 5xx is not stored: the key is free again.
func Middleware(next http.Handler) http.Handler {
	var st [shards]shard
	for i := range st {
		st[i].index = map[[maxKey]byte]uint32{}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header["Idempotency-Key"]
		if len(k) != 1 || k[0] == "" || len(k[0]) > maxKey {
			http.Error(w, "Idempotency-Key required (at most 64 bytes)", http.StatusBadRequest)
			return
		}
		var key [maxKey]byte
		copy(key[:], k[0])
		b := pool.Get().(*buffers)
		defer pool.Put(b)
		b.in.Reset()
		b.in.WriteString(r.Method)
		b.in.WriteByte(' ')
		b.in.WriteString(r.URL.Path)
		b.in.WriteByte('\n')
		head := b.in.Len()
		if _, err := b.in.ReadFrom(r.Body); err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		fp := sha256.Sum256(b.in.Bytes())
		h := uint32(2166136261)
		for _, c := range []byte(k[0]) {
			h = (h ^ uint32(c)) * 16777619
		}
		sh := &st[h%shards]
		sh.mu.Lock()
		if i, ok := sh.index[key]; ok {
			rec := sh.recs[i/perBlock][i%perBlock]
			switch {
			case rec.fp != fp:
				sh.mu.Unlock()
				http.Error(w, "Idempotency-Key reused with another request", http.StatusUnprocessableEntity)
			case !rec.done:
				sh.mu.Unlock()
				http.Error(w, "a request with this Idempotency-Key is in flight", http.StatusConflict)
			default:
				b.out.Reset()
				b.out.Write(sh.chunks[rec.chunk][rec.off : rec.off+rec.len])
				ct := sh.types[rec.ct]
				sh.mu.Unlock()
				hd := w.Header()
				if ct != "" {
					hd["Content-Type"] = []string{ct}
				}
				hd["Idempotent-Replayed"] = replayed
				w.WriteHeader(int(rec.status))
				w.Write(b.out.Bytes())
			}
			return
		}
		n := sh.n
		sh.n++
		if n%perBlock == 0 {
			sh.recs = append(sh.recs, make([]record, perBlock))
		}
		sh.index[key] = n
		sh.recs[n/perBlock][n%perBlock] = record{fp: fp}
		sh.mu.Unlock()

		b.rd.Reset(b.in.Bytes()[head:])
		r.Body = &b.rd
		b.out.Reset()
		b.w = capture{ResponseWriter: w, out: &b.out}
		next.ServeHTTP(&b.w, r)
		status := b.w.status
		if status == 0 {
			status = http.StatusOK
		}
		ct := w.Header().Get("Content-Type")

		sh.mu.Lock()
		defer sh.mu.Unlock()
		t := 0
		for t < len(sh.types) && sh.types[t] != ct {
			t++
		}
		if status >= 500 || t == 256 { // not stored: the key is free again
			delete(sh.index, key)
			return
		}
		if t == len(sh.types) {
			sh.types = append(sh.types, ct)
		}
		size := b.out.Len()
		if k := len(sh.chunks); k == 0 || cap(sh.chunks[k-1])-len(sh.chunks[k-1]) < size {
			sh.chunks = append(sh.chunks, make([]byte, 0, max(chunk, size)))
		}
		c := &sh.chunks[len(sh.chunks)-1]
		rec := &sh.recs[n/perBlock][n%perBlock]
		rec.done, rec.status, rec.ct = true, uint16(status), uint8(t)
		rec.chunk, rec.off, rec.len = uint32(len(sh.chunks)-1), uint32(len(*c)), uint32(size)
		*c = append(*c, b.out.Bytes()...)
	})
}

// capture passes the response through and keeps its status and a copy of
// its body.
type capture struct {
	http.ResponseWriter
	out    *bytes.Buffer
	status int
}

func (c *capture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *capture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.out.Write(p)
	return c.ResponseWriter.Write(p)
}
