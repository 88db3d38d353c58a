package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Digest is an order-independent hash of a set of (id, document) pairs: the lane-wise
// sum, modulo 2^64, of each pair's SHA-256. Documents may be added in any order, or by
// several workers whose digests are then combined with Add, and the result is the same.
// The zero value is the digest of the empty set.
type Digest [4]uint64

// AddDocument adds one pair.
func (d *Digest) AddDocument(id string, body []byte) {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	h.Write(n[:])
	h.Write([]byte(id))
	h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	for i := range d {
		d[i] += binary.BigEndian.Uint64(sum[i*8:])
	}
}

// Add combines another digest into d.
func (d *Digest) Add(o Digest) {
	for i := range d {
		d[i] += o[i]
	}
}

// String returns the digest as 64 hex characters.
func (d Digest) String() string {
	var b [32]byte
	for i, v := range d {
		binary.BigEndian.PutUint64(b[i*8:], v)
	}
	return hex.EncodeToString(b[:])
}
