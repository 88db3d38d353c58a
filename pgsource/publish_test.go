package pgsource_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/snapflip/snapflip/internal/testenv/rig"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
)

// Whole publishes from Postgres to the Bigtable emulator, of what only Postgres hands
// the publisher: its keys, its documents as it renders them, its queries and its
// partitioned reads.

// TestFailedSyncChangesNothingVisible: every way the rows in Postgres can fail a sync
// leaves the pointer, and the version it was writing is marked failed.
func TestFailedSyncChangesNothingVisible(t *testing.T) {
	tests := []struct {
		name   string
		break_ string // SQL that makes the next sync fail
		want   string
	}{
		{name: "duplicate key in the second collection", break_: `INSERT INTO orders VALUES (7, 'u1')`, want: `duplicate key "7"`},
		{name: "NULL key", break_: `INSERT INTO orders VALUES (NULL, 'u1')`, want: "NULL key"},
		{name: "oversized document", break_: `INSERT INTO users VALUES ('big', repeat('x', 2000000))`, want: "over the limit"},
		{name: "table dropped", break_: `DROP TABLE orders`, want: "orders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig.New(t, rig.TwoCollections, rig.TwoTables...)
			good, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
			if err != nil {
				t.Fatal(err)
			}
			r.Exec(t, tt.break_)
			_, err = r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Publish = %v; want an error saying %q", err, tt.want)
			}
			if p := r.Pointer(t); p.Version != good.Manifest.Version {
				t.Errorf("pointer moved to %s after a failed sync; want %s", p.Version, good.Manifest.Version)
			}
			if last := r.LastManifest(t); last.Version != good.Manifest.Version && last.State != snapshot.StateFailed {
				t.Errorf("failed sync's version %s is %s; want failed", last.Version, last.State)
			}
		})
	}
}

func TestPublishManyCollectionsAndRows(t *testing.T) {
	var cols []pgsource.Collection
	for i := range 5 {
		name := fmt.Sprintf("c%d", i)
		cols = append(cols, pgsource.Collection{Name: name, Query: fmt.Sprintf("SELECT g AS id, md5(g::text) AS h FROM generate_series(1, %d) g", 1000*(i+1)), Key: "id"})
	}
	r := rig.New(t, cols)
	res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		c := res.Manifest.Collections[fmt.Sprintf("c%d", i)]
		if c.Rows != int64(1000*(i+1)) || c.Written != c.Rows {
			t.Errorf("c%d = %+v; want %d rows read and written", i, c, 1000*(i+1))
		}
	}
}

// TestPublishPartitioned: a table read in parts, in parallel, is published with the
// rows, digest and bytes of the same table read whole.
func TestPublishPartitioned(t *testing.T) {
	r := rig.New(t, []pgsource.Collection{{Name: "big", Table: "big", Key: "id"}},
		`CREATE TABLE big AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g`)
	src := r.Pub.Source.(*pgsource.Source)
	src.Readers, src.PartitionMinRows = 3, 1000
	res, err := r.Pub.Publish(context.Background(), snapshot.PublishOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Readers = 1
	whole := *r.Pub
	whole.Versions = snapshot.NewVersionGen(uuid.New(), nil)
	res2, err := whole.Publish(context.Background(), snapshot.PublishOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	a, b := res.Manifest.Collections["big"], res2.Manifest.Collections["big"]
	if a.Rows != 20000 || a.Digest != b.Digest || a.Bytes != b.Bytes {
		t.Errorf("partitioned read %+v; whole read %+v; want the same rows and digest", a, b)
	}
}
