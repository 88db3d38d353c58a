package snapshot

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Digest is an order-independent hash of a set of (id, document) pairs: the lane-wise
// sum, modulo 2^64, of two seeded 64-bit xxHash values of each pair. Documents may be
// added in any order, or by several workers whose digests are then combined with Add,
// and the result is the same. It detects change, it does not resist forgery: xxHash is
// used for speed (a 1,000,000-row sync hashes about 350 MB). The zero value is the
// digest of the empty set.
type Digest [2]uint64

// digestSeeds seed the two lanes differently, so they fail independently.
var digestSeeds = [2]uint64{0x9e3779b97f4a7c15, 0xc2b2ae3d27d4eb4f}

// AddDocument adds one pair.
func (d *Digest) AddDocument(id string, body []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(id)))
	for i, seed := range digestSeeds {
		h := xxhash.NewWithSeed(seed)
		h.Write(n[:])
		h.WriteString(id)
		h.Write(body)
		d[i] += h.Sum64()
	}
}

// Add combines another digest into d.
func (d *Digest) Add(o Digest) {
	for i := range d {
		d[i] += o[i]
	}
}

// String returns the digest as 32 hex characters.
func (d Digest) String() string {
	var b [16]byte
	for i, v := range d {
		binary.BigEndian.PutUint64(b[i*8:], v)
	}
	return hex.EncodeToString(b[:])
}

// Sub removes another digest from d: the digest of a set minus a subset of it.
func (d *Digest) Sub(o Digest) {
	for i := range d {
		d[i] -= o[i]
	}
}

// Contribution returns the digest of the one pair (id, body): what AddDocument adds.
func Contribution(id string, body []byte) Digest {
	var d Digest
	d.AddDocument(id, body)
	return d
}

// ParseDigest parses the 32 hex characters String writes.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if s == "" {
		return d, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return d, fmt.Errorf("%w digest %q", ErrInvalid, s)
	}
	for i := range d {
		d[i] = binary.BigEndian.Uint64(b[i*8:])
	}
	return d, nil
}
