package api

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/snapflip/snapflip/snapshot"
)

// History lists the audit trail; the status page shows it when the reader has it.
type History interface {
	ListHistory(ctx context.Context, limit int) ([]snapshot.AuditEntry, error)
}

// BaseRecords lists the records of bases built beside the stream of versions; the
// status page shows them when the reader has them.
type BaseRecords interface {
	ListBases(ctx context.Context) ([]snapshot.BaseStatus, error)
}

// statusData is what the status page shows.
type statusData struct {
	Dataset    string
	Now        time.Time
	Pointer    snapshot.Pointer
	HasCurrent bool
	Current    snapshot.Manifest
	// CurrentInfo describes Current; Collections are its collections' chains.
	CurrentInfo versionInfo
	Collections []collectionStatus
	Age         time.Duration
	TTL         time.Duration
	AgePercent  float64
	Versions    []versionInfo
	History     []snapshot.AuditEntry
	// Bases describes each base built beside the stream that is in hand or ended
	// within BasesShownFor (BaseLine).
	Bases []string
	Chart template.HTML
	// Freshness: versions published in the last minute, and the current version's
	// commit-to-publish delay when a watched change published it.
	PerMinute int
	// PerMinuteMore says more than PerMinute were: the page reads statusScan versions.
	PerMinuteMore bool
	Lag           time.Duration
	Err           string
}

// statusTimeout bounds the Bigtable reads of one status page.
const statusTimeout = 2 * time.Second

// The status page reads the newest statusScan versions, enough to count a minute of
// versions made every 250 ms, and shows the newest statusShown of them.
const (
	statusScan  = 300
	statusShown = 60
)

// statusPage answers GET /: a read-only, server-rendered page with an inline SVG chart,
// no scripts and no external assets.
func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	if !s.seesAll(r) {
		// It shows every collection's rows and bytes.
		writeProblem(w, Problem{Type: typeForbidden, Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "the status page needs an identity that reads every collection whole (a grant of \"*\" without rows, and no scoped grant before it)"})
		return
	}
	d := statusData{Dataset: s.cfg.Dataset, Now: time.Now().UTC()}
	// An operator opens this page during exactly the incident where Bigtable does not
	// answer: it renders what it could read within statusTimeout, never waits longer.
	ctx, cancel := context.WithTimeout(r.Context(), statusTimeout)
	defer cancel()
	ptr, err := s.reader.Pointer(ctx)
	switch {
	case errors.Is(err, snapshot.ErrNoVersion):
		d.Err = "No version has been published yet."
	case err != nil:
		d.Err = "The pointer cannot be read right now."
	default:
		d.Pointer, d.HasCurrent = ptr, true
	}
	all, err := s.reader.Versions(ctx, "", statusScan)
	if err != nil && d.Err == "" {
		d.Err = "The versions cannot be listed right now."
	}
	for _, m := range all {
		if !m.PublishedAt.IsZero() && d.Now.Sub(m.PublishedAt) < time.Minute {
			d.PerMinute++
		}
	}
	d.PerMinuteMore = len(all) == statusScan && d.Now.Sub(all[len(all)-1].StartedAt) < time.Minute
	all = all[:min(len(all), statusShown)]
	// The timeline spans the versions shown alone: a rollback's target from days ago
	// would squeeze them into its last pixels.
	timeline := all
	if d.HasCurrent {
		all = snapshot.WithVersion(ctx, all, ptr.Version, s.reader.Manifest)
	}
	for _, m := range all {
		if m.Version == ptr.Version && !m.ChangeSeen.IsZero() && !m.PublishedAt.IsZero() {
			d.Lag = m.PublishedAt.Sub(m.ChangeSeen)
		}
		d.Versions = append(d.Versions, describeVersion(m, ptr.Version))
		if m.Version == ptr.Version {
			d.Current = m
			d.CurrentInfo = d.Versions[len(d.Versions)-1]
			d.Collections = collectionStatuses(m, d.Now)
			d.TTL = m.TTL
			d.Age = d.Now.Sub(m.DataTime())
			if m.TTL > 0 {
				d.AgePercent = min(100, 100*d.Age.Seconds()/m.TTL.Seconds())
			}
		}
	}
	if h, ok := s.reader.(History); ok {
		d.History, _ = h.ListHistory(ctx, 20)
	}
	if b, ok := s.reader.(BaseRecords); ok {
		recs, _ := b.ListBases(ctx)
		for _, rec := range BasesShown(recs, d.Now) {
			d.Bases = append(d.Bases, BaseLine(rec, d.Now))
		}
	}
	d.Chart = chart(timeline, d.History, ptr.Version)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
	if err := statusTemplate.Execute(w, d); err != nil {
		s.log.ErrorContext(r.Context(), "render status page", "err", err)
	}
}

// collectionStatus is one collection of the current version as the status page shows
// it.
type collectionStatus struct {
	Name  string
	Rows  int64
	Bytes int64
	// Chain summarizes the chain a read consults: "delta → 3 layers → base 41h old".
	Chain string
	// Layers lists the chain's layers, newest first, one a line.
	Layers string
	// Own says what the version's publish wrote for the collection.
	Own string
}

func collectionStatuses(m snapshot.Manifest, now time.Time) []collectionStatus {
	var out []collectionStatus
	for _, name := range m.CollectionNames() {
		c := m.Collections[name]
		cs := collectionStatus{Name: name, Rows: c.Rows, Bytes: c.Bytes, Chain: chainSummary(m, name, now), Own: ownSummary(c.Own)}
		if h := c.Held; h != nil {
			cs.Own = fmt.Sprintf("held for %s at its state before: %s; its new base is built beside the stream", compactAge(now.Sub(h.Since)), h.Why)
		}
		var lines []string
		for _, l := range c.Layers {
			line := fmt.Sprintf("%s %s: %s", l.Version, l.Kind, plural(l.Docs, "doc"))
			if l.Tombstones > 0 {
				line += ", " + plural(l.Tombstones, "tombstone")
			}
			lines = append(lines, line+", "+ByteSize(l.Bytes)+", written "+compactAge(now.Sub(layerDataTime(m, l)))+" ago")
		}
		cs.Layers = strings.Join(lines, "\n")
		out = append(out, cs)
	}
	return out
}

// layerDataTime returns when a layer's cells were last written as version m records
// it: a refresh of m rewrote every layer of its chains.
func layerDataTime(m snapshot.Manifest, l snapshot.LayerRef) time.Time {
	if m.RefreshedAt.After(l.DataTime) {
		return m.RefreshedAt
	}
	return l.DataTime
}

// chainSummary describes the chain a read of collection name consults: what the
// version wrote itself (base, delta, or unchanged when it wrote no layer), how many
// layers there are, and how old the base at the end is: "delta → 3 layers → base 41h
// old". A full copy is "full copy, 2h old".
func chainSummary(m snapshot.Manifest, name string, now time.Time) string {
	c := m.Collections[name]
	if len(c.Layers) == 0 {
		return "full copy, " + compactAge(now.Sub(m.DataTime())) + " old"
	}
	base := c.Layers[len(c.Layers)-1]
	age := compactAge(now.Sub(layerDataTime(m, base)))
	own := "unchanged"
	if c.Own != nil && c.Own.Kind != snapshot.LayerNone {
		own = string(c.Own.Kind)
	}
	if len(c.Layers) == 1 && c.Own != nil && c.Own.Kind == snapshot.LayerBase {
		return "base → 1 layer, " + age + " old"
	}
	return own + " → " + plural(int64(len(c.Layers)), "layer") + " → " + string(base.Kind) + " " + age + " old"
}

// plural returns "1 doc", "2 docs".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ownSummary says what a version's publish wrote for one collection.
func ownSummary(o *snapshot.OwnLayer) string {
	if o == nil {
		return "full copy"
	}
	var s string
	if o.Kind == snapshot.LayerNone {
		s = "no layer"
	} else {
		s = fmt.Sprintf("%s: %d inserted, %d changed, %d deleted; %d rendered", o.Kind, o.Inserted, o.Changed, o.Deleted, o.Rendered)
	}
	if o.Mode.Kind != snapshot.KindNone {
		s += " (" + o.Mode.String() + ")"
	}
	return s
}

// compactAge formats a duration in its largest sensible unit: 45s, 12m, 41h, 9d.
func compactAge(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < 72*time.Hour:
		return fmt.Sprintf("%dh", int64(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int64(d/(24*time.Hour)))
}

// ByteSize formats n bytes as "12.3 MiB".
func ByteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// chart draws the version timeline: one dot per version at its time, its height the
// version's document count, its colour its state; rollbacks and unpins as vertical
// marks; the current version ringed.
func chart(ms []snapshot.Manifest, history []snapshot.AuditEntry, current snapshot.Version) template.HTML {
	const W, H, pad = 900.0, 220.0, 36.0
	if len(ms) == 0 {
		return ""
	}
	ms = slices.Clone(ms)
	slices.Reverse(ms) // oldest first
	t0, t1 := ms[0].StartedAt, ms[len(ms)-1].StartedAt
	span := max(t1.Sub(t0).Seconds(), 1)
	var maxRows int64 = 1
	for _, m := range ms {
		maxRows = max(maxRows, m.Rows())
	}
	x := func(t time.Time) float64 { return pad + (W-2*pad)*min(max(t.Sub(t0).Seconds()/span, 0), 1) }
	y := func(n int64) float64 { return H - pad - (H-2*pad)*float64(n)/float64(maxRows) }
	colors := map[snapshot.State]string{
		snapshot.StatePublished: "#1a7f37", snapshot.StateRetired: "#57606a", snapshot.StateSealed: "#0969da",
		snapshot.StateFailed: "#cf222e", snapshot.StateRolledBack: "#bf8700", snapshot.StateWriting: "#8250df",
		snapshot.StateUnchanged: "#afb8c1",
	}
	svg := fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="version timeline">`, W, H, W, H)
	svg += fmt.Sprintf(`<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#d0d7de"/>`, pad, H-pad, W-pad, H-pad)
	svg += fmt.Sprintf(`<text x="%.0f" y="%.0f" font-size="11" fill="#57606a">%s</text>`, pad, H-pad+16, t0.UTC().Format("01-02 15:04:05"))
	svg += fmt.Sprintf(`<text x="%.0f" y="%.0f" font-size="11" fill="#57606a" text-anchor="end">%s</text>`, W-pad, H-pad+16, t1.UTC().Format("01-02 15:04:05"))
	svg += fmt.Sprintf(`<text x="4" y="%.0f" font-size="11" fill="#57606a">%d docs</text>`, pad-6, maxRows)
	for _, e := range history {
		if e.Action == snapshot.ActionFlip || e.At.Before(t0) {
			continue
		}
		c := "#bf8700"
		if e.Action == snapshot.ActionUnpin {
			c = "#0969da"
		}
		svg += fmt.Sprintf(`<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s" stroke-dasharray="4 3"><title>%s %s</title></line>`,
			x(e.At), pad, x(e.At), H-pad, c, e.Action, template.HTMLEscapeString(e.Reason))
		svg += fmt.Sprintf(`<text x="%.1f" y="%.0f" font-size="10" fill="%s">%s</text>`, x(e.At)+3, pad-4, c, e.Action)
	}
	for _, m := range ms {
		cx, cy := x(m.StartedAt), y(m.Rows())
		if m.Version == current {
			svg += fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="9" fill="none" stroke="#1a7f37" stroke-width="2"/>`, cx, cy)
		}
		svg += fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s %s %d docs</title></circle>`,
			cx, cy, colors[m.State], m.Version, m.State, m.Rows())
	}
	return template.HTML(svg + `</svg>`)
}

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"bytes": ByteSize,
	"short": func(v snapshot.Version) string {
		if len(v) > 12 {
			return string(v[:8]) + "…" + string(v[len(v)-6:])
		}
		return string(v)
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>snapflip: {{.Dataset}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1f2328;max-width:1000px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.muted{color:#57606a} .card{border:1px solid #d0d7de;border-radius:6px;padding:12px 16px;margin:12px 0}
table{border-collapse:collapse;width:100%} td,th{text-align:left;padding:4px 8px;border-bottom:1px solid #eaeef2;font-size:13px}
code{font:12px ui-monospace,monospace} .bar{background:#eaeef2;border-radius:4px;height:10px;width:300px;display:inline-block;vertical-align:middle}
.fill{background:#1a7f37;height:10px;border-radius:4px} .warn{background:#bf8700} .pin{color:#bf8700;font-weight:600}
.state-published{color:#1a7f37} .state-failed{color:#cf222e} .state-rolled_back{color:#bf8700} .state-unchanged{color:#6e7781}
</style></head><body>
<h1>snapflip · dataset <code>{{.Dataset}}</code></h1>
<div class="muted">read-only status, {{.Now.Format "2006-01-02 15:04:05"}} UTC</div>
{{if .Err}}<div class="card">{{.Err}}</div>{{end}}
{{if .HasCurrent}}<div class="card">
<div>current version <code>{{.Pointer.Version}}</code>{{if .Pointer.Pinned}} <span class="pin">pinned</span> — {{.Pointer.Reason}}{{end}}</div>
<div class="muted">flipped {{ago .Now .Pointer.FlippedAt}} by {{.Pointer.By}} · fence {{.Pointer.Fence}} · previous <code>{{short .Pointer.Previous}}</code></div>
<div>age {{.Age.Round 1000000000}}{{if .TTL}} of TTL {{.TTL}}
<span class="bar"><span class="fill{{if gt .AgePercent 50.0}} warn{{end}}" style="width:{{printf "%.0f" .AgePercent}}%;display:block"></span></span>{{end}}</div>
{{with .CurrentInfo}}{{if .Version}}<div class="muted">{{if .Shape}}{{.Shape}} · {{end}}chain {{.ChainLength}} · publish wrote {{bytes .BytesWritten}}{{if .Parent}} · parent <code>{{short .Parent}}</code>{{end}}</div>{{end}}{{end}}
<div class="muted">freshness: {{.PerMinute}}{{if .PerMinuteMore}}+{{end}} version{{if ne .PerMinute 1}}s{{end}} published in the last minute{{if .Lag}} · this one published {{.Lag.Round 1000000}} after its change was seen{{else}} · this one by the schedule or by hand{{end}}</div>
</div>
{{if .Collections}}<h2>Collections</h2>
<table><tr><th>collection</th><th>documents</th><th>size</th><th>chain</th><th>this version wrote</th></tr>
{{range .Collections}}<tr><td><code>{{.Name}}</code></td><td>{{.Rows}}</td><td>{{bytes .Bytes}}</td><td{{if .Layers}} title="{{.Layers}}"{{end}}>{{.Chain}}</td><td>{{.Own}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{if .Bases}}<h2>Bases beside the stream</h2>
<div class="card">{{range .Bases}}<div>{{.}}</div>{{end}}</div>{{end}}
<h2>Timeline</h2>
<div class="card">{{.Chart}}
<div class="muted">dots: versions (height: documents; green published, grey retired, amber rolled back, red failed); ring: current; dashed: rollbacks and unpins</div></div>
<h2>Versions</h2>
<table><tr><th>version</th><th>state</th><th>started</th><th>documents</th><th>shape</th><th>written</th><th>source</th><th>fence</th></tr>
{{range .Versions}}<tr><td><code>{{.Version}}</code>{{if .Current}} ●{{end}}</td><td class="state-{{.State}}">{{.State}}{{if .Reason}}<br><span class="muted" style="font-size:11px">{{.Reason}}</span>{{end}}</td><td>{{ago $.Now .StartedAt}}</td>
<td>{{range $k, $v := .Counts}}{{$k}} {{$v}}<br>{{end}}</td><td>{{or .Shape "?"}}{{if gt .ChainLength 1}} · chain {{.ChainLength}}{{end}}</td><td>{{bytes .BytesWritten}}</td><td><code>{{.Source.LSN}}</code></td><td>{{.Fence}}</td></tr>
{{end}}</table>
{{if .History}}<h2>History</h2>
<table><tr><th>when</th><th>action</th><th>from → to</th><th>fence</th><th>by</th><th>reason</th></tr>
{{range .History}}<tr><td>{{ago $.Now .At}}</td><td>{{.Action}}</td><td><code>{{short .From}}</code> → <code>{{short .To}}</code></td><td>{{.Fence}}</td><td>{{.By}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{end}}
</body></html>
`))
