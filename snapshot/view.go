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
