package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/snapshot"
)

// inspectCommand is `syncer inspect VERSION`: a version's manifest in full.
func (m *Syncer) inspectCommand(g *syncerFlags) *cobra.Command {
	var asTable, asJSON bool
	c := &cobra.Command{
		Use:   "inspect VERSION",
		Short: "Print a version's manifest in full",
		Long: `Inspect prints a version's manifest as JSON: its state, who wrote it and when, the
source LSN, the fencing token, the bytes its publish wrote, and each collection's
count, digest, chain of layers, indexes and what the publish wrote for it; and under
"index_layers", for each collection with indexes, what each layer of its chain wrote
for each index (entries, entries removed, bytes), read from the manifest of the
version that wrote the layer.

With --table it prints the same for people: per collection, the chain a read consults,
newest layer first (each layer's version, kind, documents, tombstones, bytes, data time
and expiry: the data time plus the TTL), and what this version's publish wrote (the
kind of its layer, how changed rows were found, and the rows inserted, changed,
deleted and rendered), then its indexes, each field with its Postgres type, and per
index and layer the entries written, the entries removed and their bytes. A full
copy has one "layer", the version's own rows.`,
		Example: `  syncer inspect 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 --config snapflip.yaml
  syncer inspect 7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1767225600000 --table --config snapflip.yaml`,
		Args: versionArgs("VERSION"),
		RunE: m.readRun(g, func(ctx context.Context, e *readEnv, args []string) error {
			man, err := e.store.ReadManifest(ctx, e.cfg.Dataset, snapshot.Version(args[0]))
			if err != nil {
				return err
			}
			in, err := inspect(ctx, e.store, man)
			if err != nil {
				return err
			}
			if asTable {
				return writeInspect(e.out, in, e.cfg.TTL, time.Now())
			}
			return printJSON(e.out, in)
		}),
	}
	c.Flags().BoolVar(&asTable, "table", false, "print tables of each collection's chain and what the publish wrote, not JSON")
	c.Flags().BoolVar(&asJSON, "json", false, "print the manifest as JSON (the default)")
	c.MarkFlagsMutuallyExclusive("table", "json")
	return c
}

// writeInspect prints in's manifest for people: the version, then per collection its
// chain of layers, what the publish wrote, and its indexes with what each layer wrote
// for them. ttl is the configured TTL, for a manifest without its own.
func writeInspect(w io.Writer, in inspection, ttl time.Duration, now time.Time) error {
	m := in.Manifest
	if m.TTL > 0 {
		ttl = m.TTL
	}
	clock := inspectClock{ttl: ttl, now: now}
	stamp, expiry := clock.stamp, clock.expiry
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	format := "0 (full copy)"
	switch m.Format {
	case snapshot.FormatFull:
	case snapshot.FormatLayered:
		format = "2 (layered)"
	default:
		format = fmt.Sprintf("%d (unknown to this syncer)", m.Format)
	}
	fmt.Fprintf(tw, "version\t%s\n", m.Version)
	fmt.Fprintf(tw, "state\t%s\n", m.State)
	if m.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", m.Reason)
	}
	fmt.Fprintf(tw, "format\t%s\n", format)
	fmt.Fprintf(tw, "shape\t%s\n", dash(api.VersionShape(m)))
	fmt.Fprintf(tw, "parent\t%s\n", dash(string(m.Parent)))
	fmt.Fprintf(tw, "written\t%s (%d bytes sent to storage)\n", humanBytes(m.BytesWritten), m.BytesWritten)
	fmt.Fprintf(tw, "writer\t%s\n", m.Writer)
	fmt.Fprintf(tw, "token\t%d\n", m.Fence)
	fmt.Fprintf(tw, "source\t%s\n", m.Source.String())
	fmt.Fprintf(tw, "started\t%s\n", stamp(m.StartedAt))
	fmt.Fprintf(tw, "sealed\t%s\n", stamp(m.SealedAt))
	fmt.Fprintf(tw, "published\t%s\n", stamp(m.PublishedAt))
	if !m.RefreshedAt.IsZero() {
		fmt.Fprintf(tw, "refreshed\t%s\n", stamp(m.RefreshedAt))
	}
	ttlText := "-"
	if ttl > 0 {
		ttlText = ttl.String()
	}
	fmt.Fprintf(tw, "data time\t%s\n", stamp(m.DataTime()))
	fmt.Fprintf(tw, "expires\t%s (TTL %s)\n", expiry(m.DataTime()), ttlText)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, name := range m.CollectionNames() {
		if err := writeCollection(w, m, name, clock, in.IndexLayers[name]); err != nil {
			return err
		}
	}
	return nil
}

// inspectClock formats a manifest's times as of now, expiring by ttl.
type inspectClock struct {
	ttl time.Duration
	now time.Time
}

// stamp formats t with how long ago it was; "-" for no time.
func (c inspectClock) stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339) + " (" + c.now.Sub(t).Round(time.Second).String() + " ago)"
}

// expiry formats when data written at data expires; "-" without a TTL or a time.
func (c inspectClock) expiry(data time.Time) string {
	if c.ttl <= 0 || data.IsZero() {
		return "-"
	}
	exp := data.Add(c.ttl)
	s := exp.UTC().Format(time.RFC3339)
	if !exp.After(c.now) {
		s += " (expired)"
	}
	return s
}

// writeCollection prints one collection of manifest m: its chain of layers, what the
// publish wrote, and its indexes with what each layer wrote for them.
func writeCollection(w io.Writer, m snapshot.Manifest, name string, clock inspectClock, layers []layerIndexes) error {
	c := m.Collections[name]
	fmt.Fprintf(w, "\ncollection %s: %d documents, %s, digest %s\n", name, c.Rows, humanBytes(c.Bytes), dash(c.Digest))
	fmt.Fprintf(w, "  this version wrote: %s\n", ownText(c.Own))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  LAYER\tKIND\tDOCS\tTOMBSTONES\tBYTES\tDATA TIME\tEXPIRES")
	if len(c.Layers) == 0 {
		// A full copy: the version's own rows hold the collection.
		fmt.Fprintf(tw, "  %s\tfull\t%d\t0\t%s\t%s\t%s\n", m.Version, c.Rows, humanBytes(c.Bytes),
			m.DataTime().UTC().Format(time.RFC3339), clock.expiry(m.DataTime()))
	}
	for _, l := range c.Layers {
		data := l.DataTime
		dataText := data.UTC().Format(time.RFC3339)
		if m.RefreshedAt.After(data) {
			// A refresh of the version rewrote every layer of its chains.
			data = m.RefreshedAt
			dataText = data.UTC().Format(time.RFC3339) + " (refreshed)"
		}
		kind := string(l.Kind)
		if l.Merged > 0 {
			kind = fmt.Sprintf("delta (merges %d)", l.Merged)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Version, kind, l.Docs, l.Tombstones, humanBytes(l.Bytes),
			dataText, clock.expiry(data))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeIndexes(w, c, layers)
}

// ownText says what a version's publish wrote for one collection.
func ownText(o *snapshot.OwnLayer) string {
	if o == nil {
		return "a full copy"
	}
	var b strings.Builder
	if o.Kind == snapshot.LayerNone {
		b.WriteString("no layer; the parent's chain as it was")
	} else {
		fmt.Fprintf(&b, "a %s layer: %d inserted, %d changed, %d deleted, %d rendered", o.Kind, o.Inserted, o.Changed, o.Deleted, o.Rendered)
		if o.Copied > 0 {
			fmt.Fprintf(&b, ", %d copied from the deltas it merged", o.Copied)
		}
		fmt.Fprintf(&b, "; %d of %d cells and %d of %d fingerprint chunks written", o.Written, o.Emitted, o.ChunksWritten, o.Chunks)
	}
	if o.Mode.Kind != snapshot.KindNone {
		fmt.Fprintf(&b, " (mode %s)", o.Mode)
	}
	return b.String()
}
