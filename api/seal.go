package api

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// sealer keeps a position a caller may not read: a scoped caller's changes cursor
// may stand after an id outside its scope, which the cursor must carry but never
// show. It is AES-GCM under a key every replica of the API derives alike, bound to
// what the cursor is for (the version, the collection and the scope), so that it
// opens for nothing else.
type sealer struct{ aead cipher.AEAD }

// newSealer derives a sealer from secret (Auth.CursorKey); an empty secret gets a
// random key, good for this process alone.
func newSealer(secret []byte) *sealer {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	key := sha256.Sum256(append([]byte("snapflip changes cursor\x00"), secret...))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return &sealer{aead: aead}
}

func (s *sealer) seal(plain, bound []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, bound)
}

var errUnsealed = errors.New("not sealed by this API for this read")

func (s *sealer) open(sealed, bound []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errUnsealed
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], bound)
	if err != nil {
		return nil, errUnsealed
	}
	return plain, nil
}
