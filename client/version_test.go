package client

import (
	"encoding/json"
	"testing"
)

func TestVersionOrder(t *testing.T) {
	const u = "00000000-0000-4000-8000-000000000000-"
	for _, tc := range []struct {
		v, w string
		want int
	}{
		{u + "1767225600000", u + "1767225600001", -1},
		{u + "1767225600001", u + "1767225600000", 1},
		{u + "9", u + "10", -1}, // by the number, not the text
		{u + "5", "ffffffff-0000-4000-8000-000000000000-5", 0},
		{"", u + "1", -1},
		{"not-a-version", u + "0", 0}, // no creation time: as old as the epoch
	} {
		if got := parseVersion(tc.v).Compare(parseVersion(tc.w)); got != tc.want {
			t.Errorf("%q.Compare(%q) = %d, want %d", tc.v, tc.w, got, tc.want)
		}
		if got, want := parseVersion(tc.v).Less(parseVersion(tc.w)), tc.want < 0; got != want {
			t.Errorf("%q.Less(%q) = %t, want %t", tc.v, tc.w, got, want)
		}
	}
}

func TestDecodeWireValues(t *testing.T) {
	var page struct {
		Parent versionID   `json:"parent"`
		Kind   changesKind `json:"kind"`
	}
	for _, tc := range []struct {
		body       string
		wantParent versionID
		wantKind   changesKind
	}{
		{`{"parent":"a-12","kind":"delta"}`, versionID{id: "a-12", millis: 12}, changesDelta},
		{`{"kind":"unchanged"}`, versionID{}, changesUnchanged},
		{`{"parent":null,"kind":"base"}`, versionID{}, changesBase},
		{`{"kind":"full"}`, versionID{}, changesFull},
		{`{"kind":"layered"}`, versionID{}, changesOther}, // a kind from a newer API
		{`{}`, versionID{}, changesOther},
	} {
		page.Parent, page.Kind = versionID{}, 0
		if err := json.Unmarshal([]byte(tc.body), &page); err != nil {
			t.Errorf("decode %s: %v", tc.body, err)
			continue
		}
		if page.Parent != tc.wantParent || page.Kind != tc.wantKind {
			t.Errorf("decode %s = parent %+v, kind %d; want %+v, %d", tc.body, page.Parent, page.Kind, tc.wantParent, tc.wantKind)
		}
	}
	if err := json.Unmarshal([]byte(`{"kind":3}`), &page); err == nil {
		t.Error("decoding a kind that is a number succeeded; want an error")
	}
	for name, want := range map[string]streamEvent{"flip": eventFlip, "": eventOther, "heartbeat": eventOther} {
		if got := parseStreamEvent(name); got != want {
			t.Errorf("parseStreamEvent(%q) = %d, want %d", name, got, want)
		}
	}
}
