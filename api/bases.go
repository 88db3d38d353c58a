package api

import (
	"fmt"
	"strings"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// BasesShownFor is how long a base that ended (taken or dropped) stays listed on the
// status page and in `syncer versions`; one still in hand is always listed.
const BasesShownFor = time.Hour

// BasesShown returns the records worth showing at now: every base in hand, and
// those that ended within BasesShownFor.
func BasesShown(recs []snapshot.BaseStatus, now time.Time) []snapshot.BaseStatus {
	var out []snapshot.BaseStatus
	for _, b := range recs {
		if b.Building() || now.Sub(b.Updated) < BasesShownFor {
			out = append(out, b)
		}
	}
	return out
}

// BaseLine describes a base beside the stream in one line: its collection and state,
// the rows and bytes written of those expected, how long it has run and what is left,
// who builds it, and why.
func BaseLine(b snapshot.BaseStatus, now time.Time) string {
	var s strings.Builder
	fmt.Fprintf(&s, "base of %s: %s, %d of %d rows", b.Collection, b.State, b.Rows, b.Expected)
	if b.Expected > 0 {
		fmt.Fprintf(&s, " (%.0f%%)", 100*float64(b.Rows)/float64(b.Expected))
	}
	fmt.Fprintf(&s, ", %s", ByteSize(b.Bytes))
	if !b.Started.IsZero() {
		fmt.Fprintf(&s, ", started %s ago", now.Sub(b.Started).Round(time.Second))
	}
	if eta := b.ETA(); !eta.IsZero() {
		fmt.Fprintf(&s, ", about %s left", max(eta.Sub(now), 0).Round(time.Second))
	}
	if b.State == "building" && now.Sub(b.Updated) > time.Minute {
		fmt.Fprintf(&s, ", last heard of %s ago", now.Sub(b.Updated).Round(time.Second))
	}
	if b.State == "failed" {
		fmt.Fprintf(&s, " (%s; tried again at %s)", b.Err, b.RetryAt.UTC().Format(time.TimeOnly))
	}
	if b.Writer != "" {
		fmt.Fprintf(&s, ", by %s", b.Writer)
	}
	fmt.Fprintf(&s, "; why: %s", b.Why)
	return s.String()
}
