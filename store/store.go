package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/snapshot"
)

// Column families.
const (
	famDocs     = "d" // documents: MaxAge(ttl) or MaxVersions(1)
	famManifest = "m" // manifests: MaxAge(ttl + grace)
	famControl  = "c" // pointer, leases: MaxVersions(1), never age
	famSlots    = "s" // tick claims: MaxAge(SlotRetention)
	famAudit    = "h" // audit trail: MaxAge(AuditRetention)
)

// Config says which Bigtable table to use and how to write to it.
type Config struct {
	// Project and Instance name the Bigtable instance; default "local", "local".
	Project, Instance string
	// Table is the table name; default "snapflip".
	Table string
	// AppProfile is the app profile for data operations; it must use single-cluster
	// routing on a replicated instance, which conditional writes need. Default: the
	// instance's default profile.
	AppProfile string
	// EmulatorHost, when set, connects to a Bigtable emulator at host:port without
	// credentials (BIGTABLE_EMULATOR_HOST).
	EmulatorHost string
	// TTL is how long document cells live (family d MaxAge); default 168h.
	TTL time.Duration
	// ManifestGrace is how much longer manifests live than documents; default 24h,
	// a negative value none (manifests live as long as documents).
	ManifestGrace time.Duration
	// SlotRetention is how long tick claims live; default 72h.
	SlotRetention time.Duration
	// AuditRetention is how long audit entries live; default 90 days.
	AuditRetention time.Duration
	// BatchRows bounds the rows of one ApplyBulk; default 1000 (measured: see docs/performance.md).
	BatchRows int
	// BatchBytes bounds the bytes of one ApplyBulk; default 4 MiB.
	BatchBytes int
	// Writers is how many ApplyBulk calls run at once; default 8 (measured).
	Writers int
	// RowRetries is how often a row that failed inside an ApplyBulk is retried;
	// default 5, a negative value never.
	RowRetries int
	// BatchTimeout bounds one ApplyBulk attempt, so an unreachable Bigtable fails the
	// sync instead of hanging it; default 60s.
	BatchTimeout time.Duration
	// OpTimeout bounds every other call (a read, a conditional write) that comes with
	// no deadline of its own; the client retries reads until then. Default 10s.
	OpTimeout time.Duration
	// DialOptions are added to the emulator connection (tests inject faults here).
	DialOptions []grpc.DialOption
}

// DefaultConfig returns the defaults: the values a zero field takes (Project and
// Instance "local", as the emulator takes any).
func DefaultConfig() Config {
	return Config{
		Project:        "local",
		Instance:       "local",
		Table:          "snapflip",
		TTL:            168 * time.Hour,
		ManifestGrace:  24 * time.Hour,
		SlotRetention:  72 * time.Hour,
		AuditRetention: 90 * 24 * time.Hour,
		BatchRows:      1000,
		BatchBytes:     4 << 20,
		Writers:        8,
		RowRetries:     5,
		BatchTimeout:   time.Minute,
		OpTimeout:      10 * time.Second,
	}
}

// withDefaults fills the zero fields with DefaultConfig's values.
func (c Config) withDefaults() Config {
	def := DefaultConfig()
	c.Project = cmp.Or(c.Project, def.Project)
	c.Instance = cmp.Or(c.Instance, def.Instance)
	c.Table = cmp.Or(c.Table, def.Table)
	c.TTL = cmp.Or(c.TTL, def.TTL)
	c.ManifestGrace = cmp.Or(c.ManifestGrace, def.ManifestGrace)
	c.SlotRetention = cmp.Or(c.SlotRetention, def.SlotRetention)
	c.AuditRetention = cmp.Or(c.AuditRetention, def.AuditRetention)
	c.RowRetries = cmp.Or(c.RowRetries, def.RowRetries)
	c.BatchRows = cmp.Or(c.BatchRows, def.BatchRows)
	c.BatchBytes = cmp.Or(c.BatchBytes, def.BatchBytes)
	c.Writers = cmp.Or(c.Writers, def.Writers)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, def.BatchTimeout)
	c.OpTimeout = cmp.Or(c.OpTimeout, def.OpTimeout)
	return c
}

// manifestGrace is how much longer manifests live than documents: ManifestGrace,
// none when negative.
func (c Config) manifestGrace() time.Duration { return max(c.ManifestGrace, 0) }

// Validate reports the first field that is not usable, by name, in an error wrapping
// snapshot.ErrInvalid. A zero field that takes a default (withDefaults) is usable.
func (c Config) Validate() error {
	if err := c.withDefaults().validate(); err != nil {
		return fmt.Errorf("%w store config: %w", snapshot.ErrInvalid, err)
	}
	return nil
}

func (c Config) validate() error {
	switch {
	case c.TTL < time.Second:
		return fmt.Errorf("ttl %s: must be at least 1s", c.TTL)
	case c.TTL%time.Second != 0:
		// Bigtable keeps a rule's age in whole seconds: 1.5s would read back as 1s,
		// and every start would set it again.
		return fmt.Errorf("ttl %s: must be whole seconds", c.TTL)
	case c.SlotRetention < 0:
		return fmt.Errorf("tick claims' retention %s: must not be negative", c.SlotRetention)
	case c.AuditRetention < 0:
		return fmt.Errorf("audit retention %s: must not be negative", c.AuditRetention)
	case c.BatchRows < 1 || c.BatchRows > 100_000:
		return fmt.Errorf("bigtable.batch_rows %d: must be 1..100000", c.BatchRows)
	case c.BatchBytes < 1<<10:
		return fmt.Errorf("bigtable.batch_bytes %d: must be at least 1024", c.BatchBytes)
	case c.Writers < 1 || c.Writers > 256:
		return fmt.Errorf("bigtable.writers %d: must be 1..256", c.Writers)
	case c.BatchTimeout <= 0:
		return fmt.Errorf("bigtable.batch_timeout %s: must be positive", c.BatchTimeout)
	case c.OpTimeout <= 0:
		// Without it a read retries an unreachable Bigtable forever.
		return fmt.Errorf("bigtable.op_timeout %s: must be positive", c.OpTimeout)
	}
	if c.Project == "local" && c.EmulatorHost == "" {
		return errors.New("bigtable.project is \"local\" but BIGTABLE_EMULATOR_HOST is unset: " +
			"start the emulator (make emulator, or go run cloud.google.com/go/bigtable/cmd/emulator -port 8086) " +
			"and export BIGTABLE_EMULATOR_HOST=localhost:8086, or set bigtable.project and bigtable.instance to a real instance")
	}
	return nil
}

// reconnect bounds how long a connection waits between attempts to reconnect. gRPC's
// default backoff grows to two minutes during an outage, so after a long one Bigtable
// stayed unreachable for up to two minutes after it came back: the API not ready, the
// syncer's attempts failing. With one second at most, recovery takes about a second
// whatever the outage's length; an attempt against a host that is down costs a
// refused connection.
var reconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 5 * time.Second,
})

// maxMessageBytes is the gRPC message size the clients accept, matching the emulator.
const maxMessageBytes = 256 << 20

// Store is snapflip's storage on one Bigtable table.
type Store struct {
	cfg    Config
	client *bigtable.Client
	admin  *bigtable.AdminClient
	tbl    *bigtable.Table
	conn   *grpc.ClientConn // the emulator connection, when there is one
	opts   []option.ClientOption
	dirs   dirCache // packed index layers' directories (ScanEntries)
}

// The storage interfaces of the packages above (layer, resolver) are checked by
// internal/storetest, which holds this store and the in-memory one to one contract.
var _ snapshot.PublishStore = (*Store)(nil)

// Open connects to Bigtable. It does not touch the table; call EnsureSchema (writers)
// or Ping (readers) to find out whether it is there.
func Open(ctx context.Context, cfg Config, opts ...option.ClientOption) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg}
	if cfg.EmulatorHost != "" && len(opts) == 0 {
		dial := append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			reconnect,
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
		}, cfg.DialOptions...)
		conn, err := grpc.NewClient(cfg.EmulatorHost, dial...)
		if err != nil {
			return nil, fmt.Errorf("bigtable emulator %s: %w", cfg.EmulatorHost, err)
		}
		s.conn = conn
		opts = []option.ClientOption{option.WithGRPCConn(conn)}
	}
	custom := len(opts) > 0 // the emulator, or connections made by the caller
	if !custom {
		opts = []option.ClientOption{option.WithGRPCDialOption(reconnect)}
	}
	s.opts = opts
	ccfg := bigtable.ClientConfig{AppProfile: cfg.AppProfile}
	if custom {
		ccfg.MetricsProvider = bigtable.NoopMetricsProvider{}
		ccfg.DisableSession = true
	}
	client, err := bigtable.NewClientWithConfig(ctx, cfg.Project, cfg.Instance, ccfg, opts...)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bigtable client: %w", err)
	}
	s.client = client
	admin, err := bigtable.NewAdminClient(ctx, cfg.Project, cfg.Instance, opts...)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bigtable admin client: %w", err)
	}
	s.admin = admin
	s.tbl = client.Open(cfg.Table)
	return s, nil
}

// Close releases the connections.
func (s *Store) Close() error {
	var errs []error
	if s.client != nil {
		errs = append(errs, s.client.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Close())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	return errors.Join(errs...)
}

// Config returns the store's configuration.
func (s *Store) Config() Config { return s.cfg }

// Ping reads one row to prove that Bigtable and the table are reachable.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	_, err := s.tbl.ReadRow(ctx, pointerKey("\x00ping"))
	if err != nil {
		return s.wrap(err, "ping bigtable table %s", s.cfg.Table)
	}
	return nil
}

// op bounds a call that has no deadline by OpTimeout.
func (s *Store) op(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

// wrap adds context to a Bigtable error and says what to do about the common ones.
func (s *Store) wrap(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	code := status.Code(err)
	if errors.Is(err, context.DeadlineExceeded) {
		code = codes.DeadlineExceeded
	}
	switch code {
	case codes.NotFound:
		return fmt.Errorf("%s: table %q or instance %s/%s not found (run the syncer once to create the table): %w",
			msg, s.cfg.Table, s.cfg.Project, s.cfg.Instance, err)
	case codes.Unavailable, codes.DeadlineExceeded:
		where := s.cfg.Project + "/" + s.cfg.Instance
		if s.cfg.EmulatorHost != "" {
			where = "the emulator at " + s.cfg.EmulatorHost
		}
		return fmt.Errorf("%s: bigtable (%s) %w: %w", msg, where, snapshot.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}
