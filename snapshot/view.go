package snapshot

import "context"

// View is one version as a reader sees it: every answer made from a View comes from
// that version alone.
type View struct {
	Version  Version
	Manifest Manifest
}

// HasCollection reports whether the version holds the collection.
func (v View) HasCollection(name string) bool {
	_, ok := v.Manifest.Collections[name]
	return ok
}

// ChainRef names a collection of a dataset as a version reads it: through a chain
// of layers (Manifest.Chain: newest first, down to a base). Every read of documents
// or index entries takes one.
type ChainRef struct {
	Dataset    string
	Chain      []Version
	Collection string
}

// RunRef names the fingerprint run one layer wrote for a collection of a dataset:
// what that layer wrote, not the version read through its chain.
type RunRef struct {
	Dataset    string
	Layer      Version
	Collection string
}

// DocumentGetter reads documents by id through a chain, in one read: the map holds
// the ids found. The layer engine and the resolver embed it in what they ask of
// storage.
type DocumentGetter interface {
	GetDocuments(ctx context.Context, in ChainRef, ids []string) (map[string][]byte, error)
}

// Span is the ids a scan covers: those after From (from From on, when Inclusive) and,
// unless To is "", before To. Ids compare as bytes.
type Span struct {
	From      string
	Inclusive bool
	To        string
}

// After returns the span's ids after id.
func (sp Span) After(id string) Span { return Span{From: id, To: sp.To} }

// Contains reports whether id is in the span.
func (sp Span) Contains(id string) bool {
	if id < sp.From || (id == sp.From && !sp.Inclusive) {
		return false
	}
	return sp.To == "" || id < sp.To
}

// Empty reports whether no id can be in the span.
func (sp Span) Empty() bool { return sp.To != "" && sp.To <= sp.From }
