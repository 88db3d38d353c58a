package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/snapflip/snapflip/internal/syncer"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Environment variables the binaries read.
const (
	EnvConfig       = "SNAPFLIP_CONFIG"
	EnvPostgresDSN  = "SNAPFLIP_POSTGRES_DSN"
	EnvEmulatorHost = "BIGTABLE_EMULATOR_HOST"
	EnvDataset      = "SNAPFLIP_DATASET"
	EnvProject      = "SNAPFLIP_BIGTABLE_PROJECT"
	EnvInstance     = "SNAPFLIP_BIGTABLE_INSTANCE"
	EnvTable        = "SNAPFLIP_BIGTABLE_TABLE"
	EnvAppProfile   = "SNAPFLIP_BIGTABLE_APP_PROFILE"
	EnvAddr         = "SNAPFLIP_ADDR"
	EnvRefresh      = "SNAPFLIP_POINTER_REFRESH"
	EnvLogFormat    = "SNAPFLIP_LOG_FORMAT"
	EnvMetricsAddr  = "SNAPFLIP_METRICS_ADDR"
	EnvCacheSize    = "SNAPFLIP_CACHE_SIZE"
	EnvAdminToken   = "SNAPFLIP_ADMIN_TOKEN"
	EnvAuthConfig   = "SNAPFLIP_AUTH_CONFIG"
	EnvMaxStale     = "SNAPFLIP_MAX_STALE"
	EnvMaxWaiters   = "SNAPFLIP_MAX_WAITERS"
)

// BigtableConfig is the bigtable section of the syncer's config.
type BigtableConfig struct {
	// Project, default "local".
	Project string `yaml:"project"`
	// Instance, default "local".
	Instance string `yaml:"instance"`
	// Table, default "snapflip".
	Table string `yaml:"table"`
	// AppProfile must use single-cluster routing with transactional writes, the same
	// profile as the API's (docs/configuration.md#app-profile).
	AppProfile string `yaml:"app_profile"`
	// BatchRows bounds the rows of one ApplyBulk; default 1000 (measured: see docs/performance.md).
	BatchRows int `yaml:"batch_rows"`
	// BatchBytes bounds the bytes of one ApplyBulk; default 4 MiB.
	BatchBytes int `yaml:"batch_bytes"`
	// Writers is how many ApplyBulk calls run at once; default 8 (measured).
	Writers int `yaml:"writers"`
	// BatchTimeout bounds one ApplyBulk attempt (5 retries follow); default 60s.
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// OpTimeout bounds every other Bigtable call; default 10s.
	OpTimeout time.Duration `yaml:"op_timeout"`
}

// GateConfig is a validation gate (snapshot.Gate) in YAML. Every field is a pointer:
// a field the YAML leaves out takes the value of the gate it overrides (a collection's
// the global validation's, the global one the built-in default), and a field it sets,
// to any value, replaces it: min_rows: 0 on a collection turns off a global min_rows.
type GateConfig struct {
	// MaxShrink refuses losing more than this fraction of a collection's rows against
	// the current version; default 0.5. 0 or 1 turns it off.
	MaxShrink *float64 `yaml:"max_shrink"`
	// MinRows refuses a collection with fewer rows; default 0 (off).
	MinRows *int64 `yaml:"min_rows"`
	// AllowEmpty lets a collection that had rows become empty; default false.
	AllowEmpty *bool `yaml:"allow_empty"`
}

// gate returns the gate, taking the fields g leaves unset from def.
func (g GateConfig) gate(def snapshot.Gate) snapshot.Gate {
	out := def
	if g.MaxShrink != nil {
		out.MaxShrink = *g.MaxShrink
		if out.MaxShrink == 0 { // off, as 1 is: the Go gate's zero is its default
			out.MaxShrink = 1
		}
	}
	if g.MinRows != nil {
		out.MinRows = *g.MinRows
	}
	if g.AllowEmpty != nil {
		out.AllowEmpty = *g.AllowEmpty
	}
	return out
}

func (g GateConfig) validate(field string) error {
	if g.MaxShrink != nil && (*g.MaxShrink < 0 || *g.MaxShrink > 1) {
		return fmt.Errorf("%s.max_shrink %v: must be between 0 and 1", field, *g.MaxShrink)
	}
	if g.MinRows != nil && *g.MinRows < 0 {
		return fmt.Errorf("%s.min_rows %d: must not be negative", field, *g.MinRows)
	}
	return nil
}

// CollectionConfig is one collection of the config: its source and its gate.
type CollectionConfig struct {
	pgsource.Collection `yaml:",inline"`
	GateConfig          `yaml:",inline"`
}

// LeaseConfig is the lease section of the syncer's config.
type LeaseConfig struct {
	// Duration is how long a holder's lease survives without renewal before another
	// replica takes it over; default 15s. Renewals run every Duration/3.
	Duration time.Duration `yaml:"duration"`
	// AcquireTimeout bounds how long a tick waits for the lease; default 1m.
	AcquireTimeout time.Duration `yaml:"acquire_timeout"`
}

// WatchConfig is the watch section of the syncer's config: change-driven syncs in
// `syncer run`.
type WatchConfig struct {
	// Enabled starts a sync soon after a committed change to a table a collection
	// reads; the schedule still runs as a backstop. Default true.
	Enabled bool `yaml:"enabled"`
	// Interval is how often the source's statistics (stats mode) and the watched
	// relations' definitions (both modes) are polled; default 200ms.
	Interval time.Duration `yaml:"interval"`
	// MinInterval is the least time between the starts of two change-driven syncs,
	// so a write storm makes a version every MinInterval, not one per commit;
	// default 1s in stats mode (each version reads every row's xmin) and 250ms in
	// logical mode (a version reads only the changed keys), so that commits that keep
	// coming are served within a second.
	MinInterval time.Duration `yaml:"min_interval"`
	// Mode is how commits are noticed: "stats" polls Postgres' table statistics every
	// Interval (no DDL, no privilege; a commit by a session that ran a statement less
	// than a second before can be seen ~10 s late), "logical" reads the source's
	// logical replication stream (see docs/freshness.md). Default stats.
	Mode pgsource.WatchMode `yaml:"mode"`
	// Publication is the Postgres publication the logical mode reads; default
	// "snapflip". A lower-case SQL identifier of at most 63 bytes.
	Publication string `yaml:"publication"`
	// Slot is the replication slot the logical mode reads from; default "snapflip_"
	// and the dataset, lower-cased, with every character other than a-z, 0-9 and _
	// replaced by _, cut to 63 bytes. At most 63 of a-z, 0-9 and _ (Postgres' rule).
	Slot string `yaml:"slot"`
	// HoldBytes bounds the memory the logical mode's held transactions take (the keys
	// they changed, kept for the next version); HoldWAL the WAL the slot retains for
	// them; HoldFor how long the oldest may wait. Past any (a pinned dataset, failing
	// syncs), the stream keeps only which collections changed, lets the slot advance,
	// and the next version compares those collections in full. Defaults 64 MiB,
	// 256 MiB and 5m.
	HoldBytes int64         `yaml:"hold_bytes"`
	HoldWAL   int64         `yaml:"hold_wal"`
	HoldFor   time.Duration `yaml:"hold_for"`
}

// Watch.min_interval's defaults, by mode; minIntervalUnset marks a config that sets
// none (a duration no one writes).
const (
	DefaultMinIntervalStats   = time.Second
	DefaultMinIntervalLogical = 250 * time.Millisecond
	minIntervalUnset          = time.Duration(math.MinInt64)
)

// DefaultPublication is watch.publication's default.
const DefaultPublication = "snapflip"

// maxPGName is the longest name Postgres keeps (NAMEDATALEN - 1), in bytes.
const maxPGName = 63

// slotName is Postgres' rule for a replication slot's name; publicationName is a
// lower-case SQL identifier that needs no quoting.
var (
	slotName        = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	publicationName = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)
)

// defaultSlot is watch.slot's default for dataset.
func defaultSlot(dataset string) string {
	slot := []byte("snapflip_")
	for _, r := range strings.ToLower(dataset) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			slot = append(slot, byte(r))
		} else {
			slot = append(slot, '_')
		}
	}
	return string(slot[:min(len(slot), maxPGName)])
}

// fillDefaults sets the fields whose defaults depend on the rest of the config, when
// the config leaves them empty.
func (w *WatchConfig) fillDefaults(dataset string) {
	if w.MinInterval == minIntervalUnset {
		w.MinInterval = DefaultMinIntervalStats
		if w.Mode == pgsource.WatchModeLogical {
			w.MinInterval = DefaultMinIntervalLogical
		}
	}
	if w.Publication == "" {
		w.Publication = DefaultPublication
	}
	if w.Slot == "" {
		w.Slot = defaultSlot(dataset)
	}
}

// logical reports whether the syncer watches the replication stream.
func (w WatchConfig) logical() bool { return w.Enabled && w.Mode == pgsource.WatchModeLogical }

// validate reports the first unusable watch field, by name.
func (w WatchConfig) validate() error {
	if w.Interval < 10*time.Millisecond {
		return fmt.Errorf("watch.interval %s: must be at least 10ms", w.Interval)
	}
	if w.MinInterval < 0 {
		return fmt.Errorf("watch.min_interval %s: must not be negative", w.MinInterval)
	}
	if w.Mode != pgsource.WatchModeStats && w.Mode != pgsource.WatchModeLogical {
		return fmt.Errorf("watch.mode %s: must be %q or %q", w.Mode, pgsource.WatchModeStats, pgsource.WatchModeLogical)
	}
	if !publicationName.MatchString(w.Publication) {
		return fmt.Errorf("watch.publication %q: must be a lower-case SQL identifier of 1..%d bytes "+
			"(a-z, 0-9, _ and $, starting with a-z or _)", w.Publication, maxPGName)
	}
	switch {
	case w.HoldBytes < 0:
		return fmt.Errorf("watch.hold_bytes %d: must not be negative (0 takes the default, 64 MiB)", w.HoldBytes)
	case w.HoldWAL < 0:
		return fmt.Errorf("watch.hold_wal %d: must not be negative (0 takes the default, 256 MiB)", w.HoldWAL)
	case w.HoldFor < 0:
		return fmt.Errorf("watch.hold_for %s: must not be negative (0 takes the default, 5m)", w.HoldFor)
	}
	if !slotName.MatchString(w.Slot) {
		return fmt.Errorf("watch.slot %q: must be 1..%d of a-z, 0-9 and _ (Postgres' rule for replication slot names)", w.Slot, maxPGName)
	}
	return nil
}

// PostgresConfig is the postgres section of the syncer's config.
type PostgresConfig struct {
	// DSN is the connection string; SNAPFLIP_POSTGRES_DSN overrides it. Never logged.
	DSN string `yaml:"dsn"`
	// Readers is how many connections read one large table at once, each a hash
	// partition of its keys, in one exported snapshot; default 1 (docs/performance.md
	// has what more readers gave).
	Readers int `yaml:"readers"`
	// PartitionMinRows is the row count from which a table is read in parallel;
	// default 200000.
	PartitionMinRows int64 `yaml:"partition_min_rows"`
}

// SyncerConfig is the syncer's YAML config file.
type SyncerConfig struct {
	// Dataset names what this deployment publishes; default "default".
	Dataset string `yaml:"dataset"`
	// Schedule is a cron spec (5 fields) or a descriptor ("@every 5m", "@hourly");
	// default "@every 5m".
	Schedule string `yaml:"schedule"`
	// TTL is how long a version's documents live in Bigtable; default 168h.
	TTL time.Duration `yaml:"ttl"`
	// MaxDocumentBytes bounds one document; default 8 MiB.
	MaxDocumentBytes int `yaml:"max_document_bytes"`
	// Lease tunes the publish lease every replica contends for.
	Lease    LeaseConfig    `yaml:"lease"`
	Postgres PostgresConfig `yaml:"postgres"`
	Bigtable BigtableConfig `yaml:"bigtable"`
	// Validation is the gate every collection must pass before a flip, unless the
	// collection sets its own.
	Validation GateConfig `yaml:"validation"`
	// ProgressInterval is how often a long sync logs its progress; default 10s.
	ProgressInterval time.Duration `yaml:"progress_interval"`
	// Versions is "incremental" (each version writes only what changed since its
	// parent, sharing the rest: layered versions) or "full" (every version a
	// complete copy); default incremental.
	Versions string `yaml:"versions"`
	// MaxLayers bounds how many layers a read consults per collection; a chain this
	// long gets a new base at its next change. Default 8.
	MaxLayers int `yaml:"max_layers"`
	// RebaseRatio writes a new base once a chain's deltas hold more rows than this
	// share of its base; default 0.5.
	RebaseRatio float64 `yaml:"rebase_ratio"`
	// BaseRowsPerSecond bounds how fast `syncer run` builds a base beside the
	// stream of versions compacted from storage (for rebase_ratio or the TTL's
	// keep-alive), so that it leaves the commit path its share; default 100000.
	BaseRowsPerSecond float64 `yaml:"base_rows_per_second"`
	// SourceBaseRowsPerSecond bounds how fast `syncer run` reads a held or new
	// collection's base from the source beside the stream (and parts of a shared
	// one); default 0, no bound: such a read waits while a version is written.
	SourceBaseRowsPerSecond float64 `yaml:"source_base_rows_per_second"`
	// BaseTransaction is the longest `syncer run` holds a source transaction
	// open to read a held or new collection's base beside the stream: the base is
	// read in chunks, each in a transaction of its own; default 10s.
	BaseTransaction time.Duration `yaml:"base_transaction"`
	// BasePartRows, when set, shares each base read beside the stream in chunks
	// among the syncer replicas, in parts of about this many ids: every replica of
	// `syncer run` claims parts and reads them from the source, the builder takes
	// them from storage. Default 0: each base is read by its builder alone (taking
	// a part costs the builder more CPU than reading it from Postgres does).
	BasePartRows int64 `yaml:"base_part_rows"`
	// DefinitionChanges is what `syncer run` does with a collection whose
	// definition changed (its config, its table's columns or types, its indexes)
	// or that is new: "hold" (the default) reads its base beside the stream of
	// versions, the collection held at its last state (a new one left out) while
	// the others keep flowing; "wait" writes the base in the next version, which
	// every collection waits for, so that each version stays one source snapshot
	// for all of them.
	DefinitionChanges string `yaml:"definition_changes"`
	// Watch tunes change-driven syncs.
	Watch WatchConfig `yaml:"watch"`
	// Collections are what is copied; at least one is required.
	Collections []CollectionConfig `yaml:"collections"`

	emulatorHost string
	path         string // the file it was loaded from
}

// The values of definition_changes.
const (
	DefinitionChangesHold = "hold"
	DefinitionChangesWait = "wait"
)

// The values of versions.
const (
	VersionsIncremental = "incremental"
	VersionsFull        = "full"
)

// DefaultSyncerConfig returns the defaults of every field but Collections.
func DefaultSyncerConfig() SyncerConfig {
	sc := store.DefaultConfig()
	hold := pgsource.DefaultStreamConfig()
	return SyncerConfig{
		Dataset:          "default",
		Schedule:         "@every 5m",
		TTL:              sc.TTL,
		MaxDocumentBytes: 8 << 20,
		ProgressInterval: 10 * time.Second,
		Versions:         VersionsIncremental,
		Watch: WatchConfig{Enabled: true, Interval: syncer.DefaultWatchInterval, MinInterval: minIntervalUnset, Mode: pgsource.WatchModeStats, Publication: DefaultPublication,
			HoldBytes: hold.HoldBytes, HoldWAL: hold.HoldWAL, HoldFor: hold.HoldFor},
		MaxLayers:         layer.DefaultMaxLayers,
		RebaseRatio:       layer.DefaultRebaseRatio,
		BaseRowsPerSecond: layer.DefaultBaseRowsPerSecond,
		BaseTransaction:   pgsource.DefaultBaseTransaction,
		DefinitionChanges: DefinitionChangesHold,
		Postgres:          PostgresConfig{Readers: 1, PartitionMinRows: 200_000},
		Lease:             LeaseConfig{Duration: 15 * time.Second, AcquireTimeout: time.Minute},
		Bigtable: BigtableConfig{
			Project: sc.Project, Instance: sc.Instance, Table: sc.Table,
			BatchRows: sc.BatchRows, BatchBytes: sc.BatchBytes, Writers: sc.Writers, BatchTimeout: sc.BatchTimeout, OpTimeout: sc.OpTimeout,
		},
	}
}

// LoadSyncerConfig reads the YAML file at path over the defaults, applies the
// environment, and validates. Unknown fields are errors; every error names the field.
// A config without postgres.dsn is valid: only the commands that read Postgres require
// it.
func LoadSyncerConfig(path string, getenv func(string) string) (SyncerConfig, error) {
	if path == "" {
		return SyncerConfig{}, fmt.Errorf("no config file: pass --config or set %s", EnvConfig)
	}
	f, err := os.Open(path)
	if err != nil {
		return SyncerConfig{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	cfg, err := ParseSyncerConfig(f, getenv)
	if err != nil {
		return SyncerConfig{}, fmt.Errorf("config %s: %w", path, err)
	}
	cfg.path = path
	return cfg, nil
}

// ParseSyncerConfig is LoadSyncerConfig on a reader.
func ParseSyncerConfig(r io.Reader, getenv func(string) string) (SyncerConfig, error) {
	cfg := DefaultSyncerConfig()
	data, err := io.ReadAll(r)
	if err != nil {
		return SyncerConfig{}, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return SyncerConfig{}, fmt.Errorf("%w config: not valid YAML: %w", snapshot.ErrInvalid, err)
	}
	if err := decodeFields(&root, reflect.ValueOf(&cfg).Elem(), ""); err != nil {
		return SyncerConfig{}, fmt.Errorf("%w config: %w", snapshot.ErrInvalid, err)
	}
	if dsn := getenv(EnvPostgresDSN); dsn != "" {
		cfg.Postgres.DSN = dsn
	}
	cfg.Watch.fillDefaults(cfg.Dataset)
	cfg.emulatorHost = getenv(EnvEmulatorHost)
	return cfg, cfg.Validate()
}

// Validate reports the first unusable field, by name, in an error wrapping
// snapshot.ErrInvalid.
func (c SyncerConfig) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w config: %w", snapshot.ErrInvalid, err)
	}
	return nil
}

func (c SyncerConfig) validate() error {
	if c.Dataset == "" || len(c.Dataset) > 128 {
		return fmt.Errorf("dataset %q: must be 1..128 bytes", c.Dataset)
	}
	if _, err := syncer.ParseSchedule(c.Schedule); err != nil {
		return err
	}
	if c.Lease.Duration < 100*time.Millisecond {
		return fmt.Errorf("lease.duration %s: must be at least 100ms", c.Lease.Duration)
	}
	if c.Lease.AcquireTimeout <= 0 {
		return fmt.Errorf("lease.acquire_timeout %s: must be positive", c.Lease.AcquireTimeout)
	}
	if c.MaxDocumentBytes < 1 || c.MaxDocumentBytes > 100<<20 {
		return fmt.Errorf("max_document_bytes %d: must be 1..104857600 (Bigtable's cell limit is 100 MiB)", c.MaxDocumentBytes)
	}
	if c.Postgres.Readers < 1 || c.Postgres.Readers > 64 {
		return fmt.Errorf("postgres.readers %d: must be 1..64", c.Postgres.Readers)
	}
	if c.ProgressInterval <= 0 {
		return fmt.Errorf("progress_interval %s: must be positive", c.ProgressInterval)
	}
	if err := c.Watch.validate(); err != nil {
		return err
	}
	if c.Versions != VersionsIncremental && c.Versions != VersionsFull {
		return fmt.Errorf("versions %q: must be %q or %q", c.Versions, VersionsIncremental, VersionsFull)
	}
	if c.MaxLayers < 1 || c.MaxLayers > 64 {
		return fmt.Errorf("max_layers %d: must be 1..64", c.MaxLayers)
	}
	if !(c.RebaseRatio > 0 && c.RebaseRatio <= 100) {
		return fmt.Errorf("rebase_ratio %g: must be above 0 and at most 100", c.RebaseRatio)
	}
	if !(c.BaseRowsPerSecond >= 1) {
		return fmt.Errorf("base_rows_per_second %g: must be at least 1", c.BaseRowsPerSecond)
	}
	if !(c.SourceBaseRowsPerSecond == 0 || c.SourceBaseRowsPerSecond >= 1) {
		return fmt.Errorf("source_base_rows_per_second %g: must be 0 (no bound) or at least 1", c.SourceBaseRowsPerSecond)
	}
	if c.BaseTransaction < 100*time.Millisecond {
		return fmt.Errorf("base_transaction %s: must be at least 100ms", c.BaseTransaction)
	}
	if c.BasePartRows < 0 || (c.BasePartRows > 0 && c.BasePartRows < 1000) {
		return fmt.Errorf("base_part_rows %d: must be 0 (bases not shared) or at least 1000", c.BasePartRows)
	}
	if c.DefinitionChanges != DefinitionChangesHold && c.DefinitionChanges != DefinitionChangesWait {
		return fmt.Errorf("definition_changes %q: must be %q or %q", c.DefinitionChanges, DefinitionChangesHold, DefinitionChangesWait)
	}
	if err := c.Validation.validate("validation"); err != nil {
		return err
	}
	for i, cc := range c.Collections {
		if err := cc.GateConfig.validate(fmt.Sprintf("collections[%d]", i)); err != nil {
			return err
		}
	}
	if err := pgsource.ValidateCollections(c.sources()); err != nil {
		return err
	}
	return c.StoreConfig().Validate()
}

// requirePostgres reports a config that names no Postgres: the commands that read
// the source need one; the others (versions, inspect, diff, history, rollback, unpin)
// read only Bigtable and load a config without it.
func (c SyncerConfig) requirePostgres() error {
	if c.Postgres.DSN == "" {
		return fmt.Errorf("postgres.dsn: required: set it or %s", EnvPostgresDSN)
	}
	return nil
}

// sources returns the collections' source definitions.
func (c SyncerConfig) sources() []pgsource.Collection {
	out := make([]pgsource.Collection, len(c.Collections))
	for i, cc := range c.Collections {
		out[i] = cc.Collection
	}
	return out
}

// gates returns each collection's validation gate.
func (c SyncerConfig) gates() (snapshot.Gate, map[string]snapshot.Gate) {
	def := c.Validation.gate(snapshot.DefaultGate())
	out := map[string]snapshot.Gate{}
	for _, cc := range c.Collections {
		out[cc.Name] = cc.GateConfig.gate(def)
	}
	return def, out
}

// StoreConfig returns the store settings the config implies.
func (c SyncerConfig) StoreConfig() store.Config {
	sc := store.DefaultConfig()
	sc.Project, sc.Instance, sc.Table, sc.AppProfile = c.Bigtable.Project, c.Bigtable.Instance, c.Bigtable.Table, c.Bigtable.AppProfile
	sc.EmulatorHost = c.emulatorHost
	sc.TTL = c.TTL
	sc.BatchRows, sc.BatchBytes, sc.Writers, sc.BatchTimeout = c.Bigtable.BatchRows, c.Bigtable.BatchBytes, c.Bigtable.Writers, c.Bigtable.BatchTimeout
	sc.OpTimeout = c.Bigtable.OpTimeout
	return sc
}
