package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/snapshot"
)

// TestRecentManifestsPageNewestFirst: pages of RecentManifests, each starting before
// the last version of the one before, list every manifest of the dataset exactly
// once, newest first, as ListManifests does reversed; versions made within one
// millisecond by two writers included, another dataset's never. A bad limit or a
// version that is not one is refused.
func TestRecentManifestsPageNewestFirst(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return at }
	a, b := snapshot.NewVersionGen(uuid.New(), clock), snapshot.NewVersionGen(uuid.New(), clock)
	for i := range 23 {
		for _, ds := range []string{"ds", "ds2"} {
			gen := a
			if i%3 == 0 {
				gen = b // the same millisecond as another writer's, now and then
			}
			m := snapshot.Manifest{Dataset: ds, Version: gen.Next(), State: snapshot.StatePublished, StartedAt: at, Writer: "w"}
			if err := st.CreateManifest(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if i%3 != 2 {
			at = at.Add(time.Second)
		}
	}
	all, err := st.ListManifests(ctx, "ds")
	if err != nil || len(all) != 23 {
		t.Fatalf("ListManifests = %d manifests, %v; want 23", len(all), err)
	}
	slices.Reverse(all)
	var paged []snapshot.Manifest
	var before snapshot.Version
	for pages := 0; ; pages++ {
		page, err := st.RecentManifests(ctx, "ds", before, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 5 || pages > 5 {
			t.Fatalf("page %d: %d manifests; want at most 5, in at most 5 pages", pages, len(page))
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		before = page[len(page)-1].Version
	}
	versions := func(ms []snapshot.Manifest) []snapshot.Version {
		var out []snapshot.Version
		for _, m := range ms {
			if m.Dataset != "ds" {
				t.Errorf("version %s of dataset %q listed for ds", m.Version, m.Dataset)
			}
			out = append(out, m.Version)
		}
		return out
	}
	if got, want := versions(paged), versions(all); !slices.Equal(got, want) {
		t.Errorf("pages of RecentManifests:\n%v\nwant ListManifests reversed:\n%v", got, want)
	}
	if _, err := st.RecentManifests(ctx, "ds", "", 0); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("RecentManifests with limit 0 = %v; want ErrInvalid", err)
	}
	if _, err := st.RecentManifests(ctx, "ds", "../p#ds", 5); !errors.Is(err, snapshot.ErrInvalid) {
		t.Errorf("RecentManifests before a malformed version = %v; want ErrInvalid", err)
	}
	if got, err := st.RecentManifests(ctx, "none", "", 5); err != nil || len(got) != 0 {
		t.Errorf("RecentManifests of an unknown dataset = %v, %v; want none", got, err)
	}
}

// TestManifestsInState: only the manifests in the state asked for, made at or after
// since, oldest first, and only the dataset's.
func TestManifestsInState(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	gen := snapshot.NewVersionGen(uuid.New(), func() time.Time { return at })
	var writing []snapshot.Version
	for i := range 12 {
		for _, ds := range []string{"ds", "other"} {
			m := snapshot.Manifest{Dataset: ds, Version: gen.Next(), State: snapshot.StatePublished, StartedAt: at, Writer: "w"}
			if i%4 == 1 {
				m.State = snapshot.StateWriting
				if ds == "ds" {
					writing = append(writing, m.Version)
				}
			}
			if err := st.CreateManifest(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		at = at.Add(time.Minute)
	}
	names := func(ms []snapshot.Manifest) []snapshot.Version {
		var out []snapshot.Version
		for _, m := range ms {
			if m.Dataset != "ds" || m.State != snapshot.StateWriting {
				t.Errorf("%s of dataset %q in state %s listed; want ds's writing ones", m.Version, m.Dataset, m.State)
			}
			out = append(out, m.Version)
		}
		return out
	}
	got, err := st.ManifestsInState(ctx, "ds", snapshot.StateWriting, time.Time{})
	if err != nil || !slices.Equal(names(got), writing) {
		t.Errorf("every writing manifest = %v, %v; want %v", names(got), err, writing)
	}
	since := writing[1].Time()
	got, err = st.ManifestsInState(ctx, "ds", snapshot.StateWriting, since)
	if err != nil || !slices.Equal(names(got), writing[1:]) {
		t.Errorf("writing manifests since %s = %v, %v; want %v", since, names(got), err, writing[1:])
	}
	if got, err := st.ManifestsInState(ctx, "ds", snapshot.StateSealed, time.Time{}); err != nil || len(got) != 0 {
		t.Errorf("sealed manifests = %v, %v; want none", got, err)
	}
}
