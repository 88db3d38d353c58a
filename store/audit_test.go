package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// TestAuditNewestAndAt: ListAudit with a limit returns the newest entries, newest
// first, as the whole list does; AuditAt returns the newest entry at or before a
// moment (an entry made at that very millisecond included), and says where the trail
// begins when it holds none that old, or that it is empty. Another dataset's entries
// never answer.
func TestAuditNewestAndAt(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	var times []time.Time
	for i := range 20 {
		for _, ds := range []string{"ds", "ds2"} {
			e := snapshot.AuditEntry{Dataset: ds, At: at, Action: snapshot.ActionFlip, To: snapshot.Version(fmt.Sprintf("%s-%d", ds, i)), By: "w"}
			if err := st.AppendAudit(ctx, e); err != nil {
				t.Fatal(err)
			}
		}
		times = append(times, at)
		at = at.Add(time.Duration(1+i%3) * time.Second)
	}
	all, err := st.ListAudit(ctx, "ds", 0)
	if err != nil || len(all) != 20 || all[0].To != "ds-19" || all[19].To != "ds-0" {
		t.Fatalf("ListAudit(0) = %d entries, %v; want ds's 20, newest first", len(all), err)
	}
	newest, err := st.ListAudit(ctx, "ds", 5)
	if err != nil || !slices.EqualFunc(newest, all[:5], func(a, b snapshot.AuditEntry) bool { return a.To == b.To }) {
		t.Errorf("ListAudit(5) = %v, %v; want the first 5 of %v", newest, err, all)
	}
	for i, tm := range times {
		for _, probe := range []time.Time{tm, tm.Add(999 * time.Millisecond)} {
			got, err := st.AuditAt(ctx, "ds", probe)
			if want := snapshot.Version(fmt.Sprintf("ds-%d", i)); err != nil || got.To != want {
				t.Errorf("AuditAt(%s) = %s, %v; want %s", probe.Format(time.RFC3339Nano), got.To, err, want)
			}
		}
	}
	_, err = st.AuditAt(ctx, "ds", times[0].Add(-time.Millisecond))
	if !errors.Is(err, snapshot.ErrNotFound) || !strings.Contains(err.Error(), "begins at "+times[0].Format(time.RFC3339)) {
		t.Errorf("AuditAt before the first entry = %v; want ErrNotFound saying where the trail begins", err)
	}
	if _, err := st.AuditAt(ctx, "none", at); !errors.Is(err, snapshot.ErrNotFound) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("AuditAt of a dataset without entries = %v; want ErrNotFound, the trail empty", err)
	}

	// Within one millisecond, which its rows' keys share (they sort by a random
	// suffix there), the entries' own times decide.
	ms := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, at := range []time.Time{ms.Add(-time.Second), ms.Add(900 * time.Microsecond), ms.Add(100 * time.Microsecond), ms.Add(500 * time.Microsecond)} {
		e := snapshot.AuditEntry{Dataset: "ms", At: at, Action: snapshot.ActionFlip, To: snapshot.Version(fmt.Sprint(at.Sub(ms))), By: fmt.Sprint(i)}
		if err := st.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for probe, want := range map[time.Duration]snapshot.Version{
		50 * time.Microsecond: "-1s", 100 * time.Microsecond: "100µs", 600 * time.Microsecond: "500µs",
		950 * time.Microsecond: "900µs", time.Millisecond: "900µs",
	} {
		if got, err := st.AuditAt(ctx, "ms", ms.Add(probe)); err != nil || got.To != want {
			t.Errorf("AuditAt(%s after the millisecond began) = %s, %v; want %s", probe, got.To, err, want)
		}
	}
}
