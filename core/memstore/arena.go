package memstore

import (
	"encoding/binary"
	"errors"
	"slices"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// A shard keeps its completed records packed one after the other in large
// byte slices, its arena's chunks: whatever the number of records, the
// collector sees a few hundred pointer-free objects, where a map of
// records by value made it scan every slot and mark every record's token,
// response and ID strings. The index (index.go) finds a record by the
// digest of its ID; in-flight records, few and short-lived, stay in a map.
//
// A record's bytes are never written again once packed, but for its first
// byte, which marks it deleted: records returned to callers are views of
// the arena (their body, token and uncommon header strings), which stay
// valid however the record is deleted or moved. Room is reclaimed by
// whole chunks: a chunk whose records are all deleted is dropped, and one
// less than half live has its live records copied to the current chunk
// and is dropped, so deleted records never hold much more memory than the
// live ones (records mostly expire in the order they were written, which
// empties whole chunks).
//
// A record is
//
//	flag digest uvarint(n) then, in n bytes:
//	fp varint(createdAt) varint(completedAt-createdAt)
//	varint(expiresAt-completedAt) varint(leaseUntil-createdAt)
//	varint(status) uvarint(scopeRef) uvarint(len(token)) token response
//
// where flag is recordLive or recordDeleted, times are offsets (see
// Store.offset) and their differences wrap, so that any offset, noTime
// included, round-trips while the usual ones take a few bytes; the
// response is packed as response.go says.

const (
	recordDeleted = 0
	recordLive    = 1

	// Chunks grow with the arena, from minChunk to maxChunk: a store of
	// a few records stays small, a big one has few chunks. A record
	// bigger than maxChunk gets a chunk of its own.
	minChunk = 4 << 10
	maxChunk = 64 << 10
	// A record's place is its chunk's number and its offset in it, 16
	// bits each, so a shard has at most maxChunks chunks: 4 GiB at
	// maxChunk, far more than the records a store is bounded to.
	maxChunks = 1 << 16
	// headRoom is the most bytes before n's end: flag, digest, uvarint.
	headRoom = 1 + len(digest{}) + binary.MaxVarintLen64
)

var errArenaFull = errors.New("memstore: a shard's arena has no room for another chunk")

type chunk struct {
	buf  []byte // the records written; cap(buf) is the chunk's size
	live int    // bytes of its records not deleted
}

type arena struct {
	chunks []chunk
	free   []uint32 // numbers of dropped chunks, for reuse
	cur    int      // 1 + the number of the chunk written to; 0: none
	size   int      // sum of the chunks' sizes
	cursor int      // the chunk Purge's next batch starts from
}

// completed is a packed record, read; token and resp are views of the arena.
type completed struct {
	fp                                       idem.Fingerprint
	createdAt, completedAt, expiresAt, lease int64
	status                                   int
	scope                                    scopeRef
	token, resp                              []byte
}

// packRecord writes into *scratch the record that f's completion makes,
// and returns it.
func packRecord(scratch *[]byte, f *flight, status int, completedAt, expiresAt int64, r exchange.Response) []byte {
	b := append((*scratch)[:0], make([]byte, headRoom)...)
	b = append(b, f.fp[:]...)
	b = binary.AppendVarint(b, f.createdAt)
	b = binary.AppendVarint(b, completedAt-f.createdAt)
	b = binary.AppendVarint(b, expiresAt-completedAt)
	b = binary.AppendVarint(b, f.leaseUntil-f.createdAt)
	b = binary.AppendVarint(b, int64(status))
	b = binary.AppendUvarint(b, uint64(f.scope))
	b = binary.AppendUvarint(b, uint64(len(f.token)))
	b = append(b, f.token...)
	b = appendResponse(b, r)
	*scratch = b
	n := len(b) - headRoom
	var lenBuf [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lenBuf[:], uint64(n))
	start := headRoom - k - 1 - len(digest{})
	b[start] = recordLive
	copy(b[start+1:], f.d[:])
	copy(b[headRoom-k:], lenBuf[:k])
	return b[start:]
}

// recordSize returns the size of the record at the start of b, and
// whether it is live.
func recordSize(b []byte) (int, bool) {
	n, k := binary.Uvarint(b[1+len(digest{}):])
	return 1 + len(digest{}) + k + int(n), b[0] == recordLive
}

// recordDigest returns the digest of the record at the start of b.
func recordDigest(b []byte) *digest {
	return (*digest)(b[1 : 1+len(digest{})])
}

// unpackRecord reads the record at the start of b.
func unpackRecord(b []byte) completed {
	n, k := binary.Uvarint(b[1+len(digest{}):])
	p := b[1+len(digest{})+k:][:n]
	var c completed
	c.fp = idem.Fingerprint(p[:len(c.fp)])
	p = p[len(c.fp):]
	var d, st int64
	c.createdAt, p = varint(p)
	d, p = varint(p)
	c.completedAt = c.createdAt + d
	d, p = varint(p)
	c.expiresAt = c.completedAt + d
	d, p = varint(p)
	c.lease = c.createdAt + d
	st, p = varint(p)
	c.status = int(st)
	var scope, tl int
	scope, p = uvarint(p)
	c.scope = scopeRef(scope)
	tl, p = uvarint(p)
	c.token, c.resp = p[:tl:tl], p[tl:]
	return c
}

func varint(b []byte) (int64, []byte) {
	n, size := binary.Varint(b)
	return n, b[size:]
}

func splitLoc(loc uint32) (ci, off int) { return int(loc >> 16), int(loc & 0xffff) }

// record returns the bytes from the record at loc to its chunk's end.
func (a *arena) record(loc uint32) []byte {
	ci, off := splitLoc(loc)
	return a.chunks[ci].buf[off:]
}

// put copies a packed record into the arena and returns its place.
func (a *arena) put(rec []byte) (uint32, error) {
	size := len(rec)
	ci := a.cur - 1
	switch {
	case size > maxChunk:
		var err error
		if ci, err = a.newChunk(size); err != nil {
			return 0, err
		}
	case ci < 0 || cap(a.chunks[ci].buf)-len(a.chunks[ci].buf) < size:
		// A new chunk is an eighth of the arena: the current one, part
		// empty, is then a small share of it.
		next, err := a.newChunk(max(size, min(maxChunk, max(minChunk, a.size/8))))
		if err != nil {
			return 0, err
		}
		// The chunk given up keeps its records; it is dropped once
		// they are deleted (see reclaim).
		a.cur = next + 1
		ci = next
	}
	c := &a.chunks[ci]
	off := len(c.buf)
	c.buf = append(c.buf, rec...)
	c.live += size
	return uint32(ci)<<16 | uint32(off), nil
}

func (a *arena) newChunk(size int) (int, error) {
	var ci int
	if k := len(a.free); k > 0 {
		ci = int(a.free[k-1])
		a.free = a.free[:k-1]
	} else {
		if len(a.chunks) >= maxChunks {
			return 0, errArenaFull
		}
		ci = len(a.chunks)
		a.chunks = append(a.chunks, chunk{})
	}
	// Grow rounds the size up to the allocation's, which the chunk then
	// uses whole.
	a.chunks[ci] = chunk{buf: slices.Grow([]byte(nil), size)}
	a.size += cap(a.chunks[ci].buf)
	return ci, nil
}

// drop lets the collector have chunk ci; records returned before still
// hold what they view of it.
func (a *arena) drop(ci int) {
	a.size -= cap(a.chunks[ci].buf)
	a.chunks[ci] = chunk{}
	a.free = append(a.free, uint32(ci))
	if a.cur == ci+1 {
		a.cur = 0
	}
}

// kill marks the record at loc deleted and returns its chunk's number.
func (a *arena) kill(loc uint32) int {
	ci, off := splitLoc(loc)
	c := &a.chunks[ci]
	size, _ := recordSize(c.buf[off:])
	c.buf[off] = recordDeleted
	c.live -= size
	return ci
}

// reclaim drops chunk ci if none of its records is live, or moves its
// live records to the current chunk and drops it if fewer than half of
// its bytes are live. The current chunk is not moved: it is reclaimed
// once another takes its place.
func (s *Store) reclaim(sh *shard, ci int) {
	a := &sh.arena
	if a.chunks[ci].buf == nil {
		return
	}
	if a.chunks[ci].live == 0 {
		a.drop(ci)
		return
	}
	src := a.chunks[ci].buf
	if ci == a.cur-1 || a.chunks[ci].live*2 >= len(src) {
		return
	}
	for off := 0; off < len(src); {
		size, live := recordSize(src[off:])
		if live {
			loc, err := a.put(src[off : off+size])
			if err != nil {
				return // the rest stay where they are, still indexed
			}
			tag := s.tagOf(recordDigest(src[off:]))
			sh.index.slots[sh.index.slotOf(tag, uint32(ci)<<16|uint32(off))] = uint64(tag)<<32 | uint64(loc)
			src[off] = recordDeleted
			a.chunks[ci].live -= size
		}
		off += size
	}
	a.drop(ci)
}

// find returns the index slot and the place of the completed record whose
// ID has digest d and index tag tag.
func (sh *shard) find(tag uint32, d *digest) (slot int, loc uint32, ok bool) {
	x := &sh.index
	if x.n == 0 {
		return 0, 0, false
	}
	mask := len(x.slots) - 1
	for i := x.home(tag); ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			return 0, 0, false
		}
		if uint32(v>>32) == tag && *recordDigest(sh.arena.record(uint32(v))) == *d {
			return i, uint32(v), true
		}
	}
}

// deleteRecord deletes the completed record at index slot slot and place
// loc; the caller uncounts it (or not, if it replaces it) and reclaims
// its chunk.
func (sh *shard) deleteRecord(slot int, loc uint32) (chunk int) {
	sh.index.remove(slot)
	return sh.arena.kill(loc)
}
