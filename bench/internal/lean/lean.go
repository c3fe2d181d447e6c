// Package lean is minimal-lean: a hand-written idempotency middleware for
// net/http kept as the benchmark's floor, never as a product. It has
// idemkit's replay, 409 and 422 behaviour for one process and nothing
// else: no leases, no expiry, no events, no canonical JSON. Its store is
// pointer-free (a map from a seeded 64-bit hash of the key to a record
// number, the key itself in its fixed-size record, responses in 64 KiB
// chunks of bytes per shard, never copied), so the garbage
// collector scans a pointer per chunk at most, and its
// buffers are pooled: it allocates little beyond the handler.
package lean

import (
	"bytes"
	"crypto/sha256"
	"hash/maphash"
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
	key      [maxKey]byte
	fp       [sha256.Size]byte
	free     bool // released by a 5xx: the next request with the key takes it
	done     bool
	status   uint16
	ct       uint8 // index into shard.types
	chunk    uint32
	off, len uint32
}

type shard struct {
	mu sync.Mutex
	// index maps the key's hash to its record; a key whose hash is taken
	// by another key's record probes the next hash values.
	index  map[uint64]uint32
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
		st[i].index = map[uint64]uint32{}
	}
	seed := maphash.MakeSeed()
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
		h := maphash.String(seed, k[0])
		sh := &st[h%shards]
		sh.mu.Lock()
		n, found := uint32(0), false
		for ; ; h++ {
			var ok bool
			if n, ok = sh.index[h]; !ok || sh.recs[n/perBlock][n%perBlock].key == key {
				found = ok
				break
			}
		}
		if found && !sh.recs[n/perBlock][n%perBlock].free {
			rec := sh.recs[n/perBlock][n%perBlock]
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
		if !found { // a new key; a freed one keeps its record
			n = sh.n
			sh.n++
			if n%perBlock == 0 {
				sh.recs = append(sh.recs, make([]record, perBlock))
			}
			sh.index[h] = n
		}
		sh.recs[n/perBlock][n%perBlock] = record{key: key, fp: fp}
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
			sh.recs[n/perBlock][n%perBlock].free = true
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
