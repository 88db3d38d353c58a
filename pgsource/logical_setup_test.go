package pgsource_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/pgsource"
)

const logicalSchema = `
CREATE TABLE items (id int PRIMARY KEY, name text);
CREATE TABLE lines (order_id int, line int, qty int, PRIMARY KEY (order_id, line));
CREATE TABLE payments (payment_id int, payment_date timestamptz, amount numeric,
	PRIMARY KEY (payment_date, payment_id)) PARTITION BY RANGE (payment_date);
CREATE TABLE payments_2024 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE payments_other PARTITION OF payments DEFAULT;
CREATE TABLE people (id int PRIMARY KEY, name text, dropped int, born date);
ALTER TABLE people DROP COLUMN dropped;
CREATE VIEW adults AS SELECT id, name FROM people WHERE born < '2006-01-01';
INSERT INTO items VALUES (1, 'a'), (2, 'b');
INSERT INTO lines VALUES (1, 1, 5), (1, 2, 6);
INSERT INTO payments VALUES (1, '2024-03-01', 10), (2, '2023-03-01', 20);
INSERT INTO people VALUES (1, 'ann', '1990-01-01'), (2, 'bob', '1980-01-01');
`

var logicalCollections = []pgsource.Collection{
	{Name: "items", Table: "items"},
	{Name: "lines", Table: "public.lines"},
	{Name: "payments", Table: "payments"},
	{Name: "adults", Table: "adults", Key: "id"},
	{Name: "names", Query: "SELECT id, name FROM people", Key: "id"},
}

var logicalConfig = pgsource.LogicalConfig{Publication: "snapflip", Slot: "snapflip"}

// logicalObjects returns whether the publication and the slot of cfg exist, and
// whether the publication is marked as snapflip's.
func logicalObjects(t *testing.T, dsn string, cfg pgsource.LogicalConfig) (pub, ours, slot bool) {
	t.Helper()
	ctx := context.Background()
	conn := testenv.Connect(t, ctx, dsn)
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1),
		EXISTS (SELECT FROM pg_publication WHERE pubname = $1 AND obj_description(oid, 'pg_publication') = 'created by snapflip'),
		EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $2)`, cfg.Publication, cfg.Slot).Scan(&pub, &ours, &slot); err != nil {
		t.Fatal(err)
	}
	return pub, ours, slot
}

// createSlot creates cfg's slot as the stream consumer does, and drops it when the
// test ends if it is still there (a slot outlives its database's drop otherwise).
func createSlot(t *testing.T, dsn string, cfg pgsource.LogicalConfig) {
	t.Helper()
	testenv.Exec(t, dsn, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, cfg.Slot))
	t.Cleanup(func() {
		testenv.Exec(t, dsn, fmt.Sprintf(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '%s'`, cfg.Slot))
	})
}

// wantProblems fails the test unless one of problems holds every one of want.
func wantProblems(t *testing.T, what string, problems []string, want ...string) {
	t.Helper()
	for _, p := range problems {
		if !strings.Contains(p, want[0]) {
			continue
		}
		for _, w := range want[1:] {
			if !strings.Contains(p, w) {
				t.Errorf("%s: problem %q; want it to name %q", what, p, w)
			}
		}
		return
	}
	t.Errorf("%s: problems %q; want one naming %q", what, problems, want[0])
}

// wantSetupError fails the test unless err wraps ErrLogicalSetup and names every one
// of want.
func wantSetupError(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, pgsource.ErrLogicalSetup) {
		t.Errorf("%s = %v; want ErrLogicalSetup", what, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s = %v; want it to name %q", what, err, w)
		}
	}
}

// Check creates nothing; Prepare creates the publication of the tables the
// collections read (a partitioned table's root, a view's and a query's base table)
// and maps each table collection to its relation and key positions; after it and the
// slot's creation, users' UPDATEs and DELETEs of every watched table still succeed;
// Remove drops both, and again finds nothing.
func TestLogicalPrepareAndRemove(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, logicalSchema)
	src, err := pgsource.New(dsn, logicalCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	rep, err := src.CheckLogical(ctx, logicalConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || rep.PublicationExists || rep.SlotExists || rep.SlotRetainedBytes != -1 {
		t.Errorf("check before prepare = %+v; want no problem, no publication, no slot", rep)
	}
	wantTables := []string{"public.items", "public.lines", "public.payments", "public.people"}
	if diff := gocmp.Diff(wantTables, rep.Tables); diff != "" {
		t.Errorf("check: tables (-want +got):\n%s", diff)
	}
	if len(rep.Pending) != 2 || !strings.Contains(rep.Pending[0], "CREATE PUBLICATION snapflip FOR TABLE public.items, public.lines, public.payments, public.people") {
		t.Errorf("check: pending %q; want the CREATE PUBLICATION and its COMMENT", rep.Pending)
	}
	if pub, _, slot := logicalObjects(t, dsn, logicalConfig); pub || slot {
		t.Fatalf("after check: publication %v, slot %v; want neither", pub, slot)
	}

	// Replicas starting together prepare at once.
	errs := make(chan error, 3)
	for range cap(errs) {
		go func() { _, err := src.PrepareLogical(ctx, logicalConfig); errs <- err }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("preparing 3 at once: %v", err)
		}
	}
	var got pgsource.LogicalTables
	for i := range 2 {
		if got, err = src.PrepareLogical(ctx, logicalConfig); err != nil {
			t.Fatalf("prepare #%d: %v", i+1, err)
		}
	}
	if pub, ours, slot := logicalObjects(t, dsn, logicalConfig); !pub || !ours || slot {
		t.Errorf("after prepare: publication %v, marked %v, slot %v; want a marked publication, no slot", pub, ours, slot)
	}
	oids := map[string]uint32{}
	for _, name := range wantTables {
		var oid uint32
		if err := snapshotQueryRow(t, dsn, fmt.Sprintf("SELECT '%s'::regclass::oid", name), &oid); err != nil {
			t.Fatal(err)
		}
		oids[name] = oid
	}
	rel := func(name string, collections ...string) pgsource.PublishedRelation {
		return pgsource.PublishedRelation{OID: oids[name], Name: name, Collections: collections}
	}
	want := pgsource.LogicalTables{
		Collections: []pgsource.LogicalCollection{
			{Collection: "items", Relation: rel("public.items", "items"), Columns: []string{"id", "name"},
				Key: []string{"id"}, KeyPositions: []int{0}},
			{Collection: "lines", Relation: rel("public.lines", "lines"), Columns: []string{"order_id", "line", "qty"},
				Key: []string{"order_id", "line"}, KeyPositions: []int{0, 1}},
			{Collection: "payments", Relation: rel("public.payments", "payments"), Columns: []string{"payment_id", "payment_date", "amount"},
				Key: []string{"payment_date", "payment_id"}, KeyPositions: []int{1, 0}},
		},
		Published: []pgsource.PublishedRelation{rel("public.items", "items"), rel("public.lines", "lines"),
			rel("public.payments", "payments"), rel("public.people", "adults", "names")},
	}
	slices.SortFunc(want.Published, func(a, b pgsource.PublishedRelation) int { return cmp.Compare(a.OID, b.OID) })
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("prepare: tables (-want +got):\n%s", diff)
	}

	// The publication sends a partition's changes as its root's.
	var published []string
	if err := snapshotQueryRow(t, dsn, `SELECT array_agg(format('%I.%I', schemaname, tablename) ORDER BY 1)
		FROM pg_publication_tables WHERE pubname = 'snapflip'`, &published); err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(wantTables, published); diff != "" {
		t.Errorf("pg_publication_tables (-want +got):\n%s", diff)
	}

	// Never break a writer: with the publication and a slot decoding, every watched
	// table takes UPDATE and DELETE (a table without a replica identity would not).
	createSlot(t, dsn, logicalConfig)
	testenv.Exec(t, dsn,
		`UPDATE items SET name = 'z' WHERE id = 1`, `DELETE FROM items WHERE id = 2`,
		`UPDATE lines SET qty = 7 WHERE order_id = 1 AND line = 1`, `DELETE FROM lines WHERE line = 2`,
		`UPDATE payments SET amount = 11`, `DELETE FROM payments WHERE payment_id = 2`,
		`UPDATE payments_2024 SET amount = 12`, `DELETE FROM payments_other`,
		`UPDATE people SET name = 'ann b' WHERE id = 1`, `DELETE FROM people WHERE id = 2`,
		`TRUNCATE items`)
	var changes int
	if err := snapshotQueryRow(t, dsn, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('snapflip', NULL, NULL,
		'proto_version', '1', 'publication_names', 'snapflip')`, &changes); err != nil || changes == 0 {
		t.Errorf("the slot decoded %d messages, %v; want the changes", changes, err)
	}

	rep, err = src.CheckLogical(ctx, logicalConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 || !rep.PublicationExists || !rep.PublicationOurs || len(rep.Pending) > 0 ||
		!rep.SlotExists || rep.SlotActive || rep.SlotWALStatus != "reserved" || rep.SlotRetainedBytes < 0 {
		t.Errorf("check after prepare = %+v; want our publication, an inactive slot reserving WAL, no problem", rep)
	}

	slot, pub, err := src.RemoveLogical(ctx, logicalConfig)
	if err != nil || !slot || !pub {
		t.Fatalf("remove = %v, %v, %v; want both dropped", slot, pub, err)
	}
	if pub, _, slot := logicalObjects(t, dsn, logicalConfig); pub || slot {
		t.Errorf("after remove: publication %v, slot %v; want neither", pub, slot)
	}
	if slot, pub, err := src.RemoveLogical(ctx, logicalConfig); err != nil || slot || pub {
		t.Errorf("remove again = %v, %v, %v; want nothing dropped, no error", slot, pub, err)
	}
}

// A server without wal_level logical is refused, naming the setting and the managed
// services' flags.
func TestLogicalNeedsWALLevelLogical(t *testing.T) {
	p := testenv.StartPostgresWith(t, map[string]string{"SNAPFLIP_PG_WAL_LEVEL": "replica"})
	testenv.Exec(t, p.DSN, `CREATE TABLE items (id int PRIMARY KEY)`)
	src, err := pgsource.New(p.DSN, []pgsource.Collection{{Name: "items", Table: "items"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := []string{"wal_level is replica", "ALTER SYSTEM SET wal_level = logical;", "restart",
		"cloudsql.logical_decoding=on", "rds.logical_replication=1"}
	rep, err := src.CheckLogical(ctx, logicalConfig)
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, "check", rep.Problems, want...)
	_, err = src.PrepareLogical(ctx, logicalConfig)
	t.Logf("prepare with wal_level replica: %v", err)
	wantSetupError(t, "prepare with wal_level replica", err, want...)
	if pub, _, _ := logicalObjects(t, p.DSN, logicalConfig); pub {
		t.Errorf("a refused prepare created the publication")
	}
}

// A role without REPLICATION is refused naming the grant; one that does not own the
// tables, naming them and the DBA's CREATE PUBLICATION, which, once run, is used as
// it is and kept by Remove.
func TestLogicalNeedsPrivileges(t *testing.T) {
	admin := os.Getenv(testenv.EnvPostgres)
	role := testenv.Role(t, "snapflip_logical")
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, logicalSchema, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+role,
		`GRANT CREATE ON DATABASE `+pgx.Identifier{testenv.Database(t, dsn)}.Sanitize()+` TO `+role)
	src, err := pgsource.New(testenv.AsRole(t, dsn, role), logicalCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = src.PrepareLogical(ctx, logicalConfig)
	t.Logf("without REPLICATION: %v", err)
	wantSetupError(t, "prepare without REPLICATION", err, "ALTER ROLE "+role+" REPLICATION;", "GRANT rds_replication TO "+role)

	testenv.Exec(t, admin, `ALTER ROLE `+role+` REPLICATION`)
	dbaSQL := "CREATE PUBLICATION snapflip FOR TABLE public.items, public.lines, public.payments, public.people WITH (publish_via_partition_root = true);"
	rep, err := src.CheckLogical(ctx, logicalConfig)
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, "check as a role that owns no table", rep.Problems, "does not own public.items, public.lines, public.payments, public.people", dbaSQL)
	if len(rep.Problems) != 1 {
		t.Errorf("check as a role that owns no table: problems %q; want only the publication's", rep.Problems)
	}
	_, err = src.PrepareLogical(ctx, logicalConfig)
	wantSetupError(t, "prepare as a role that owns no table", err, dbaSQL)

	testenv.Exec(t, dsn, dbaSQL)
	got, err := src.PrepareLogical(ctx, logicalConfig)
	if err != nil || len(got.Collections) != 3 || len(got.Published) != 4 {
		t.Fatalf("prepare with the DBA's publication = %+v, %v; want 3 table collections, 4 relations", got, err)
	}
	createSlot(t, dsn, logicalConfig)
	slot, pub, err := src.RemoveLogical(ctx, logicalConfig)
	if err != nil || !slot || pub {
		t.Errorf("remove = %v, %v, %v; want the slot dropped, the DBA's publication kept", slot, pub, err)
	}
	if pub, ours, _ := logicalObjects(t, dsn, logicalConfig); !pub || ours {
		t.Errorf("after remove: publication %v (marked %v); want the DBA's kept, unmarked", pub, ours)
	}
}

// A published table without a usable replica identity would fail its writers'
// UPDATEs and DELETEs: it is refused, never altered, naming the index to use; so is a
// key outside the identity, and a base table of a query. A DBA's fix is then enough.
func TestLogicalRefusesTablesWithoutReplicaIdentity(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, `
		CREATE TABLE keyed (id int NOT NULL, v text);
		CREATE UNIQUE INDEX keyed_id ON keyed (id);
		CREATE TABLE silent (id int PRIMARY KEY, v text);
		ALTER TABLE silent REPLICA IDENTITY NOTHING;
		CREATE TABLE emails (id int PRIMARY KEY, email text NOT NULL);
		CREATE UNIQUE INDEX emails_email ON emails (email);
		CREATE TABLE logs (at timestamptz, msg text);
		CREATE TABLE parts (id int NOT NULL, v text) PARTITION BY RANGE (id);
		CREATE TABLE parts_1 PARTITION OF parts FOR VALUES FROM (0) TO (10);
		CREATE UNIQUE INDEX parts_1_id ON parts_1 (id);`)
	src, err := pgsource.New(dsn, []pgsource.Collection{
		{Name: "keyed", Table: "keyed"},
		{Name: "silent", Table: "silent"},
		{Name: "emails", Table: "emails", Key: "email"},
		{Name: "logs", Query: "SELECT msg, at FROM logs", Key: "at"},
		{Name: "parts", Table: "parts", Key: "id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rep, err := src.CheckLogical(ctx, logicalConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("problems:\n%s", strings.Join(rep.Problems, "\n"))
	wantProblems(t, "no primary key", rep.Problems, "table public.keyed has no replica identity", "REPLICA IDENTITY USING INDEX keyed_id;", "REPLICA IDENTITY FULL")
	wantProblems(t, "NOTHING", rep.Problems, "table public.silent has no replica identity (REPLICA IDENTITY NOTHING)", "ALTER TABLE public.silent REPLICA IDENTITY DEFAULT;")
	wantProblems(t, "key outside the identity", rep.Problems, "collection emails: its key (email) is not in the replica identity of table public.emails",
		"ALTER TABLE public.emails REPLICA IDENTITY USING INDEX emails_email;")
	wantProblems(t, "a query's base table", rep.Problems, "table public.logs has no replica identity", "ALTER TABLE public.logs REPLICA IDENTITY FULL;")
	wantProblems(t, "a partition", rep.Problems, "partition public.parts_1 of public.parts has no replica identity", "ALTER TABLE public.parts_1 REPLICA IDENTITY USING INDEX parts_1_id;")
	if len(rep.Problems) != 5 || len(rep.Pending) != 0 {
		t.Errorf("check: %d problems, pending %q; want 5 problems, nothing pending", len(rep.Problems), rep.Pending)
	}
	_, err = src.PrepareLogical(ctx, logicalConfig)
	wantSetupError(t, "prepare", err, "public.keyed", "public.silent", "public.emails", "public.logs", "public.parts_1")
	if pub, _, _ := logicalObjects(t, dsn, logicalConfig); pub {
		t.Fatal("a refused prepare created the publication")
	}
	var ident string
	if err := snapshotQueryRow(t, dsn, `SELECT string_agg(relreplident::text, '' ORDER BY relname) FROM pg_class
		WHERE relname IN ('keyed', 'silent', 'emails', 'logs', 'parts_1')`, &ident); err != nil || ident != "ddddn" {
		t.Errorf("replica identities after a refused prepare = %q, %v; want them unchanged (ddddn)", ident, err)
	}

	testenv.Exec(t, dsn, `ALTER TABLE keyed REPLICA IDENTITY USING INDEX keyed_id`, `ALTER TABLE silent REPLICA IDENTITY DEFAULT`,
		`ALTER TABLE emails REPLICA IDENTITY USING INDEX emails_email`, `ALTER TABLE logs REPLICA IDENTITY FULL`,
		`ALTER TABLE parts_1 REPLICA IDENTITY USING INDEX parts_1_id`)
	if _, err := src.PrepareLogical(ctx, logicalConfig); err != nil {
		t.Fatalf("prepare after the DBA's fixes: %v", err)
	}
	createSlot(t, dsn, logicalConfig)
	testenv.Exec(t, dsn, `INSERT INTO keyed VALUES (1), (2)`, `INSERT INTO silent VALUES (1)`, `INSERT INTO emails VALUES (1, 'a')`,
		`INSERT INTO logs VALUES (now(), 'm')`, `INSERT INTO parts VALUES (1)`,
		`UPDATE keyed SET v = 'x'`, `DELETE FROM keyed WHERE id = 2`, `UPDATE silent SET v = 'x'`, `DELETE FROM silent`,
		`UPDATE emails SET email = 'b'`, `DELETE FROM emails`, `UPDATE logs SET msg = 'n'`, `DELETE FROM logs`,
		`UPDATE parts SET v = 'x'`, `DELETE FROM parts`)
}

// A DBA's publication must publish every table and every kind of change; the syncer
// names what is missing and the ALTER PUBLICATION, and adds nothing to it. To its own
// publication it adds a table the config gained.
func TestLogicalPublicationMissingTables(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, logicalSchema, `CREATE PUBLICATION snapflip FOR TABLE items WITH (publish = 'insert, update')`)
	src, err := pgsource.New(dsn, logicalCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = src.PrepareLogical(ctx, logicalConfig)
	t.Logf("DBA's publication: %v", err)
	wantSetupError(t, "prepare with the DBA's publication", err,
		"does not publish public.lines, public.payments, public.people",
		"ALTER PUBLICATION snapflip ADD TABLE public.lines, public.payments, public.people;",
		"ALTER PUBLICATION snapflip SET (publish = 'insert, update, delete, truncate');",
		"publish_via_partition_root = true")
	var n int
	if err := snapshotQueryRow(t, dsn, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'snapflip'`, &n); err != nil || n != 1 {
		t.Errorf("the DBA's publication has %d tables, %v; want 1, as it was", n, err)
	}

	testenv.Exec(t, dsn, `DROP PUBLICATION snapflip`)
	small, err := pgsource.New(dsn, logicalCollections[:1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.PrepareLogical(ctx, logicalConfig); err != nil {
		t.Fatal(err)
	}
	if _, err := src.PrepareLogical(ctx, logicalConfig); err != nil {
		t.Fatalf("prepare with more collections on our publication: %v", err)
	}
	if err := snapshotQueryRow(t, dsn, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'snapflip'`, &n); err != nil || n != 4 {
		t.Errorf("our publication has %d tables, %v; want 4", n, err)
	}
}

// Remove refuses a slot a process streams from, naming the process, and drops
// nothing.
func TestLogicalRemoveRefusesAnActiveSlot(t *testing.T) {
	dsn := testenv.Postgres(t)
	testenv.Exec(t, dsn, logicalSchema)
	src, err := pgsource.New(dsn, logicalCollections)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := src.PrepareLogical(ctx, logicalConfig); err != nil {
		t.Fatal(err)
	}
	createSlot(t, dsn, logicalConfig)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	stream, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close(ctx) }) // before the slot's drop
	if err := pglogrepl.StartReplication(ctx, stream, logicalConfig.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'snapflip'"}}); err != nil {
		t.Fatal(err)
	}
	pid := stream.PID()
	var rep pgsource.LogicalReport
	err = testenv.Poll(10*time.Second, func() error {
		if rep, err = src.CheckLogical(ctx, logicalConfig); err != nil || !rep.SlotActive {
			return fmt.Errorf("check = %+v, %v; want the slot active", rep, err)
		}
		return nil
	})
	if err != nil || rep.SlotPID != int(pid) {
		t.Fatalf("%v (pid %d; want %d)", err, rep.SlotPID, pid)
	}
	slot, pub, err := src.RemoveLogical(ctx, logicalConfig)
	t.Logf("remove an active slot: %v", err)
	if err == nil || slot || pub || !strings.Contains(err.Error(), fmt.Sprintf("in use by process %d", pid)) {
		t.Errorf("remove an active slot = %v, %v, %v; want an error naming process %d, nothing dropped", slot, pub, err, pid)
	}
	if pub, _, slot := logicalObjects(t, dsn, logicalConfig); !pub || !slot {
		t.Errorf("after a refused remove: publication %v, slot %v; want both kept", pub, slot)
	}
	stream.Close(ctx)
	err = testenv.Poll(10*time.Second, func() error {
		_, _, err := src.RemoveLogical(ctx, logicalConfig)
		return err
	})
	if err != nil {
		t.Errorf("remove once the stream ended: %v", err)
	}
}
