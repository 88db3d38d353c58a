package snapshot

import "fmt"

// A version's collection is a chain of layers, newest first, each holding its own
// entries (documents or fingerprints, and tombstones) in id order. What the version
// holds is their merge: for each id the newest layer's entry wins, and a tombstone
// hides the id from every older layer. ChainMerge is that merge, written once for
// the fingerprint runs a delta is computed from (chainRun) and the documents a read
// returns (the stores).

// LayerReader yields one layer's entries in strictly increasing id order.
type LayerReader[T any] interface {
	// Peek returns the layer's next entry without consuming it; ok is false at the
	// end of the layer, and err is not nil when the layer cannot be read further.
	Peek() (e T, ok bool, err error)
	// Pop consumes the entry Peek returned.
	Pop()
}

// ChainMerge merges the entries of a chain's layers into the version's: per id the
// newest layer's entry, every layer's entry for it consumed. It holds each layer's
// next entry and its id, so an entry is read from its layer once and an id is
// compared without calling back into the layer; a scan allocates nothing per entry.
type ChainMerge[T any] struct {
	// Tombstones makes Next return a winning tombstone too (then every id a layer
	// names comes out once); otherwise a tombstone only hides its id.
	Tombstones bool

	layers  []LayerReader[T]
	id      func(T) string
	deleted func(T) bool

	heads  []T      // each layer's next entry
	ids    []string // its id
	more   []bool   // whether the layer has a next entry
	primed bool     // whether heads holds the layers' first entries
	err    error    // a layer's read error, or entries out of order

	prev    string // the last id returned or hidden, to check order
	started bool   // whether prev is set
	from    int
}

// NewChainMerge returns the merge of layers (newest first); id returns an entry's id,
// and deleted whether it is a tombstone. The layers are first read by the first Next.
func NewChainMerge[T any](layers []LayerReader[T], id func(T) string, deleted func(T) bool) *ChainMerge[T] {
	return &ChainMerge[T]{
		layers:  layers,
		id:      id,
		deleted: deleted,
		heads:   make([]T, len(layers)),
		ids:     make([]string, len(layers)),
		more:    make([]bool, len(layers)),
	}
}

// Next returns the next id's winning entry, in id order; ok is false at the end. The
// first error a layer reports, or ids that do not increase, end the merge: Next
// returns that error from then on.
func (m *ChainMerge[T]) Next() (T, bool, error) {
	var zero T
	if !m.primed {
		m.primed = true
		for i := range m.layers {
			m.load(i)
		}
	}
	for m.err == nil {
		best := -1
		for i, more := range m.more {
			if more && (best < 0 || m.ids[i] < m.ids[best]) {
				best = i
			}
		}
		if best < 0 {
			return zero, false, nil
		}
		// best is the newest layer holding the smallest id: no newer one holds it.
		e, id := m.heads[best], m.ids[best]
		for i := best; i < len(m.layers); i++ {
			if m.more[i] && m.ids[i] == id {
				m.layers[i].Pop()
				m.load(i)
			}
		}
		if m.started && id <= m.prev {
			m.err = fmt.Errorf("a chain's layers are out of id order: %q after %q", id, m.prev)
			break
		}
		m.prev, m.started, m.from = id, true, best
		if m.Tombstones || !m.deleted(e) {
			return e, true, nil
		}
	}
	return zero, false, m.err
}

// From returns the index in the chain of the layer the entry Next last returned (or
// hid) is from.
func (m *ChainMerge[T]) From() int { return m.from }

// load reads layer i's next entry into heads.
func (m *ChainMerge[T]) load(i int) {
	e, ok, err := m.layers[i].Peek()
	if err != nil && m.err == nil {
		m.err = err
	}
	m.heads[i], m.more[i] = e, ok && err == nil
	if m.more[i] {
		m.ids[i] = m.id(e)
	}
}

// LayerSlice is a LayerReader over a layer's entries held in memory, in id order.
type LayerSlice[T any] []T

// Peek returns the first entry; ok is false when the slice is empty.
func (l *LayerSlice[T]) Peek() (T, bool, error) {
	if len(*l) == 0 {
		var zero T
		return zero, false, nil
	}
	return (*l)[0], true, nil
}

// Pop drops the first entry.
func (l *LayerSlice[T]) Pop() { *l = (*l)[1:] }
