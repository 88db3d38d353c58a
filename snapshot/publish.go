package snapshot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ManifestStore keeps manifests.
type ManifestStore interface {
	// CreateManifest stores a new manifest; ErrConflict if the version exists.
	CreateManifest(ctx context.Context, m Manifest) error
	// UpdateManifest replaces the stored manifest with m only if its stored state is
	// from; ErrConflict when it is not, ErrNotFound when there is no such manifest.
	UpdateManifest(ctx context.Context, m Manifest, from State) error
	// ReadManifest returns a manifest, or ErrNotFound.
	ReadManifest(ctx context.Context, dataset string, v Version) (Manifest, error)
	// ListManifests returns every manifest of the dataset, oldest first.
	ListManifests(ctx context.Context, dataset string) ([]Manifest, error)
}

// DocumentWriter writes one version's documents, batched and in parallel.
type DocumentWriter interface {
	// Write queues a document. It blocks while the writer's buffers are full and
	// returns the first error any earlier batch met, after which the writer is done.
	Write(ctx context.Context, collection string, doc Document) error
	// Close flushes what is queued, waits for it, and returns the number of documents
	// written per collection, or the first error.
	Close(ctx context.Context) (map[string]int64, error)
}

// PublishStore is what the publisher needs from storage.
type PublishStore interface {
	PointerStore
	ManifestStore
	// NewWriter returns a writer for the documents of one version; it stops when ctx
	// ends.
	NewWriter(ctx context.Context, dataset string, v Version) DocumentWriter
}

// Publisher copies the source into storage under a fresh version and flips the pointer.
type Publisher struct {
	Dataset  string
	Store    PublishStore
	Source   Source
	Versions *VersionGen
	// Writer names this process in manifests and pointer flips.
	Writer string
	// MaxDocumentBytes bounds one document; a larger one fails the sync naming it.
	MaxDocumentBytes int
	Now              func() time.Time
	Log              *slog.Logger
}

// PublishOptions tune one publish.
type PublishOptions struct {
	// Token is the fencing token to flip with, from a lease. Zero means optimistic:
	// the stored fence plus one, so that of two concurrent flips only one applies.
	Token uint64
	// Force publishes even when the source has not changed.
	Force bool
	// Slot is the scheduled tick this publish is for, recorded in the manifest.
	Slot int64
}

// PublishResult says what a publish did.
type PublishResult struct {
	// Manifest is the new version's manifest (zero when NoOp).
	Manifest Manifest
	// Previous is the version the pointer named before.
	Previous Version
	// NoOp is set when the source had not changed: either its position was the
	// current version's (nothing was read), or every collection's digest was (the
	// version written is discarded: marked failed, reason "unchanged", left to expire).
	NoOp bool
}

// cleanupTimeout bounds the bookkeeping done after a failure.
const cleanupTimeout = 10 * time.Second

// Publish runs one sync: open a consistent source snapshot, write every document under
// a fresh version, seal the manifest once the written counts equal the counts read,
// and flip the pointer with a fenced conditional write. Whatever fails, the pointer is
// left as it was and the half-written version is marked failed and left to expire.
func (p *Publisher) Publish(ctx context.Context, opts PublishOptions) (PublishResult, error) {
	now := p.now()
	cur, err := p.Store.ReadPointer(ctx, p.Dataset)
	if err != nil && !errors.Is(err, ErrNoVersion) {
		return PublishResult{}, fmt.Errorf("read pointer: %w", err)
	}
	hasCurrent := err == nil

	snap, err := p.Source.Open(ctx)
	if err != nil {
		return PublishResult{}, fmt.Errorf("open source: %w", err)
	}
	defer snap.Close(context.WithoutCancel(ctx))
	pos := snap.Position()

	if hasCurrent && !opts.Force && cur.Source.SameContents(pos, p.Source.Collections()) {
		p.log().InfoContext(ctx, "source unchanged; nothing to publish",
			"dataset", p.Dataset, "version", cur.Version, "source_lsn", pos.String())
		return PublishResult{Previous: cur.Version, NoOp: true}, nil
	}

	m := Manifest{
		Dataset:     p.Dataset,
		Version:     p.Versions.Next(),
		State:       StateWriting,
		Collections: map[string]CollectionStats{},
		Source:      pos,
		Writer:      p.Writer,
		StartedAt:   now,
		Token:       opts.Token,
		Slot:        opts.Slot,
	}
	if err := p.Store.CreateManifest(ctx, m); err != nil {
		return PublishResult{}, fmt.Errorf("create manifest %s: %w", m.Version, err)
	}
	log := p.log().With("dataset", p.Dataset, "version", m.Version)
	log.InfoContext(ctx, "sync started", "source_lsn", pos.String())

	if err := p.write(ctx, snap, &m); err != nil {
		p.fail(ctx, m, StateWriting, err)
		return PublishResult{}, err
	}
	if err := m.CheckComplete(); err != nil {
		p.fail(ctx, m, StateWriting, err)
		return PublishResult{}, err
	}
	// The snapshot is no longer needed; end the transaction before the flip.
	_ = snap.Close(ctx)

	if hasCurrent && !opts.Force {
		if same, err := p.sameAsCurrent(ctx, cur, m); err == nil && same {
			log.InfoContext(ctx, "source unchanged (same digests); not flipping", "current", cur.Version)
			p.fail(ctx, m, StateWriting, fmt.Errorf("unchanged: identical to %s", cur.Version))
			return PublishResult{Previous: cur.Version, NoOp: true}, nil
		}
	}

	sealed := m
	sealed.State = StateSealed
	sealed.SealedAt = p.now()
	if err := p.Store.UpdateManifest(ctx, sealed, StateWriting); err != nil {
		err = fmt.Errorf("seal version %s: %w", m.Version, err)
		p.fail(ctx, m, StateWriting, err)
		return PublishResult{}, err
	}
	m = sealed

	flip := Flip{Version: m.Version, Token: opts.Token, Source: pos, By: p.Writer, At: p.now()}
	if hasCurrent {
		flip.Expected = cur.Version
		if flip.Token == 0 {
			flip.Token = cur.Fence + 1
		}
	} else if flip.Token == 0 {
		flip.Token = 1
	}
	if _, err := p.Store.FlipPointer(ctx, p.Dataset, flip); err != nil {
		err = fmt.Errorf("flip pointer to %s: %w", m.Version, err)
		p.fail(ctx, m, StateSealed, err)
		return PublishResult{}, err
	}

	published := m
	published.State = StatePublished
	published.PublishedAt = flip.At
	published.Token = flip.Token
	// The pointer already names the version: bookkeeping failures from here on are
	// logged, not returned, because the publish has happened.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := p.Store.UpdateManifest(bg, published, StateSealed); err != nil {
		log.WarnContext(ctx, "mark version published", "err", err)
	}
	if hasCurrent {
		p.retire(bg, cur.Version, log)
	}
	log.InfoContext(ctx, "published", "previous", cur.Version, "token", flip.Token,
		"rows", totalRows(published), "duration", p.now().Sub(now).String())
	return PublishResult{Manifest: published, Previous: cur.Version}, nil
}

// FailAbandoned marks failed every version still writing under a fencing token older
// than token: its writer no longer holds the lease, so it can never be sealed. Only the
// current lease holder should call it. It returns how many it marked.
func (p *Publisher) FailAbandoned(ctx context.Context, token uint64) (int, error) {
	ms, err := p.Store.ListManifests(ctx, p.Dataset)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if m.State != StateWriting || m.Token >= token {
			continue
		}
		failed := m
		failed.State = StateFailed
		failed.Reason = fmt.Sprintf("abandoned: its writer (token %d) lost the lease to token %d", m.Token, token)
		if err := p.Store.UpdateManifest(ctx, failed, StateWriting); err != nil && !errors.Is(err, ErrConflict) {
			return n, err
		}
		n++
		p.log().InfoContext(ctx, "marked abandoned version failed", "dataset", p.Dataset, "version", m.Version, "writer", m.Writer)
	}
	return n, nil
}

// write streams every collection from the snapshot into storage, filling m's stats.
func (p *Publisher) write(ctx context.Context, snap SourceSnapshot, m *Manifest) error {
	w := p.Store.NewWriter(ctx, p.Dataset, m.Version)
	for _, name := range p.Source.Collections() {
		var st CollectionStats
		var d Digest
		err := snap.Scan(ctx, name, func(doc Document) error {
			if p.MaxDocumentBytes > 0 && len(doc.Body) > p.MaxDocumentBytes {
				return fmt.Errorf("%w: collection %s key %q: document is %d bytes, over the limit of %d",
					ErrSource, name, truncate(doc.ID, 200), len(doc.Body), p.MaxDocumentBytes)
			}
			st.Rows++
			st.Bytes += int64(len(doc.Body))
			d.AddDocument(doc.ID, doc.Body)
			return w.Write(ctx, name, doc)
		})
		if err != nil {
			_, _ = w.Close(ctx)
			return fmt.Errorf("collection %s: %w", name, err)
		}
		st.Digest = d.String()
		m.Collections[name] = st
	}
	written, err := w.Close(ctx)
	if err != nil {
		return fmt.Errorf("write documents: %w", err)
	}
	for name, st := range m.Collections {
		st.Written = written[name]
		m.Collections[name] = st
	}
	return nil
}

// sameAsCurrent reports whether m holds exactly what the current version holds: the
// same collection definitions and, per collection, the same count and digest.
func (p *Publisher) sameAsCurrent(ctx context.Context, cur Pointer, m Manifest) (bool, error) {
	if cur.Source.Config != m.Source.Config {
		return false, nil
	}
	cm, err := p.Store.ReadManifest(ctx, p.Dataset, cur.Version)
	if err != nil {
		return false, err
	}
	if len(cm.Collections) != len(m.Collections) {
		return false, nil
	}
	for name, c := range m.Collections {
		o, ok := cm.Collections[name]
		if !ok || o.Rows != c.Rows || o.Digest != c.Digest {
			return false, nil
		}
	}
	return true, nil
}

// fail marks the version failed, from the state it is in. It runs on a context that
// outlives the caller's, so that a cancelled sync still records its end.
func (p *Publisher) fail(ctx context.Context, m Manifest, from State, cause error) {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	failed := m
	failed.State = StateFailed
	failed.Reason = truncate(cause.Error(), 1000)
	if err := p.Store.UpdateManifest(bg, failed, from); err != nil {
		p.log().WarnContext(ctx, "mark version failed", "dataset", p.Dataset, "version", m.Version, "err", err)
	}
}

// retire moves the replaced version from published to retired.
func (p *Publisher) retire(ctx context.Context, v Version, log *slog.Logger) {
	old, err := p.Store.ReadManifest(ctx, p.Dataset, v)
	if err != nil {
		log.WarnContext(ctx, "read replaced manifest", "previous", v, "err", err)
		return
	}
	if old.State != StatePublished {
		return
	}
	old.State = StateRetired
	if err := p.Store.UpdateManifest(ctx, old, StatePublished); err != nil {
		log.WarnContext(ctx, "retire replaced version", "previous", v, "err", err)
	}
}

func (p *Publisher) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Publisher) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

func totalRows(m Manifest) int64 {
	var n int64
	for _, c := range m.Collections {
		n += c.Rows
	}
	return n
}
