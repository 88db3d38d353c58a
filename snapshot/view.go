package snapshot

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
