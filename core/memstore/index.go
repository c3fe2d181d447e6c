package memstore

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
)

// A completed record is found by the SHA-256 digest of its ID, which it
// keeps in the arena instead of the ID's strings. The digest is of
// uvarint(len(scope)) scope key, so no two IDs share the text it hashes
// (("a", "bc") and ("ab", "c") differ), and no one, a tenant choosing its
// keys included, can find two IDs sharing a digest: a lookup compares the
// whole digest, so it never returns another key's record.
type digest [sha256.Size]byte

func digestOf(scope, key string) digest {
	var buf [128]byte // keys are at most 255 bytes; most IDs fit, on the stack
	b := binary.AppendUvarint(buf[:0], uint64(len(scope)))
	b = append(b, scope...)
	b = append(b, key...)
	return sha256.Sum256(b)
}

// index maps the digests of a shard's completed records to where they lie
// in its arena: an open-addressing table of one word per slot, probed
// linearly, with no pointers for the collector to follow. A slot is
// tag<<32 | loc, or 0 when empty; tag is 32 bits of a seeded hash of the
// digest (never 0), whose high bits are the slot a probe starts from, so a
// lookup compares the arena's digest only on a tag match. The seed keeps
// a tenant from choosing keys that all land on the same slots.
type index struct {
	slots []uint64
	n     int   // slots in use
	shift uint8 // 32 - log2(len(slots)): tag>>shift is a tag's home slot
}

const (
	minIndex = 16
	// An index grows at 4/5 full, to twice its size, and shrinks at a
	// tenth to half its size: between the two its slots are 2/5 to 4/5
	// full, some 13 bytes a record.
	growNum, growDen = 4, 5
	shrinkDen        = 10
)

// tagOf is the index tag of digest d.
func (s *Store) tagOf(d *digest) uint32 {
	return uint32(maphash.Bytes(s.seed, d[:])>>32)&s.tagMask | 1
}

func (x *index) home(tag uint32) int { return int(tag >> x.shift) }

// slotOf returns the slot that holds loc, which must be in the index
// under tag.
func (x *index) slotOf(tag, loc uint32) int {
	mask := len(x.slots) - 1
	want := uint64(tag)<<32 | uint64(loc)
	i := x.home(tag)
	for range x.slots {
		if x.slots[i] == want {
			return i
		}
		i = (i + 1) & mask
	}
	panic("memstore: a record is missing from its shard's index")
}

// insert adds loc under tag; the caller knows it is not there yet.
func (x *index) insert(tag, loc uint32) {
	if (x.n+1)*growDen > len(x.slots)*growNum {
		x.resize(max(minIndex, 2*len(x.slots)))
	}
	x.put(uint64(tag)<<32 | uint64(loc))
	x.n++
}

func (x *index) put(v uint64) {
	mask := len(x.slots) - 1
	i := x.home(uint32(v >> 32))
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = v
}

// remove empties slot i, moving back the slots after it that a probe
// would no longer reach (no tombstones: a probe stops at the first empty
// slot).
func (x *index) remove(i int) {
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j stays unless its home is outside (i, j]
		// cyclically, in which case it moves into the hole at i.
		h := x.home(uint32(x.slots[j] >> 32))
		if i <= j {
			if i < h && h <= j {
				continue
			}
		} else if i < h || h <= j {
			continue
		}
		x.slots[i] = x.slots[j]
		i = j
	}
	x.slots[i] = 0
	x.n--
	if len(x.slots) > minIndex && x.n*shrinkDen < len(x.slots) {
		x.resize(len(x.slots) / 2)
	}
}

// resize rebuilds the table with size slots (a power of two).
func (x *index) resize(size int) {
	old := x.slots
	x.slots = make([]uint64, size)
	bits := 0
	for 1<<bits < size {
		bits++
	}
	x.shift = uint8(32 - bits)
	for _, v := range old {
		if v != 0 {
			x.put(v)
		}
	}
}
