package snapshot

import "strings"

// LayerMode says how a publish found a collection's changed rows (OwnLayer.Mode): a
// kind and, when every row was rendered and compared by content, why. It is written
// into manifests as its text (String), and read back from it.
type LayerMode struct {
	Kind ModeKind
	// Why says, for ModeContent, why every row was rendered; for a mode this version
	// does not know (KindUnknown), it is the text as written.
	Why string
}

// ModeKind is a kind of LayerMode.
type ModeKind int

// The kinds of layer mode.
const (
	// KindNone: no mode recorded.
	KindNone ModeKind = iota
	// KindRowVersion: the source rendered only the rows whose row versions are newer
	// than the parent's snapshot (ScanSince).
	KindRowVersion
	// KindContent: the source rendered every row, compared by content (ScanSince).
	KindContent
	// KindChangedOnly: a delta read from the changed rows alone (ChangedScanner).
	KindChangedOnly
	// KindStream: a delta read from the ids the source's change stream named alone
	// (KeyedScanner), deletions included.
	KindStream
	// KindSameFingerprint: nothing read, the table's row versions and definitions
	// being the parent's.
	KindSameFingerprint
	// KindUnknown: a mode written by another version of snapflip, kept as written.
	KindUnknown
	// KindHeld: nothing read, the collection held at its last state before its
	// definition changed while its new base is built beside the stream.
	KindHeld
)

// The modes without a reason.
var (
	ModeRowVersion      = LayerMode{Kind: KindRowVersion}
	ModeChangedOnly     = LayerMode{Kind: KindChangedOnly}
	ModeStream          = LayerMode{Kind: KindStream}
	ModeSameFingerprint = LayerMode{Kind: KindSameFingerprint}
	ModeHeld            = LayerMode{Kind: KindHeld}
)

// ContentMode is the mode of a source that rendered every row, for the reason why.
func ContentMode(why string) LayerMode { return LayerMode{Kind: KindContent, Why: why} }

// contentPrefix begins a content mode's text.
const contentPrefix = "content: "

// modeTexts are the texts of the modes without a reason.
var modeTexts = map[ModeKind]string{
	KindRowVersion:      "row-version",
	KindChangedOnly:     "row-version, changed rows only",
	KindStream:          "stream, changed ids only",
	KindSameFingerprint: "unchanged: same fingerprint",
	KindHeld:            "held: its new base is built beside the stream",
}

// String returns the mode's text, as manifests and logs hold it: "row-version",
// "content: <why>", ….
func (m LayerMode) String() string {
	switch m.Kind {
	case KindNone:
		return ""
	case KindContent:
		return contentPrefix + m.Why
	case KindUnknown:
		return m.Why
	}
	return modeTexts[m.Kind]
}

// ParseLayerMode returns the mode whose text is s (String); a text it does not know is
// kept as KindUnknown.
func ParseLayerMode(s string) LayerMode {
	if s == "" {
		return LayerMode{}
	}
	if why, ok := strings.CutPrefix(s, contentPrefix); ok {
		return ContentMode(why)
	}
	for k, text := range modeTexts {
		if text == s {
			return LayerMode{Kind: k}
		}
	}
	return LayerMode{Kind: KindUnknown, Why: s}
}

// MarshalText returns the mode's text.
func (m LayerMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode's text.
func (m *LayerMode) UnmarshalText(b []byte) error {
	*m = ParseLayerMode(string(b))
	return nil
}
