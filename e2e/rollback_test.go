package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/snapflip/snapflip/internal/cli"
	"github.com/snapflip/snapflip/internal/testenv"
	"github.com/snapflip/snapflip/internal/testenv/stack"
	"github.com/snapflip/snapflip/snapshot"
)

// syncerCmd runs a syncer command in-process and returns its output.
func (e *env) syncerCmd(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	var out bytes.Buffer
	s := &cli.Syncer{Getenv: e.Getenv, Stdout: &out, Stderr: io.Discard}
	err := s.Run(context.Background(), args)
	return out.String(), err
}

// publishGens publishes one version per generation and returns them, oldest first.
func (e *env) publishGens(tb testing.TB, gens ...int) []string {
	tb.Helper()
	var vs []string
	for _, g := range gens {
		testenv.Exec(tb, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
		out, err := e.sync(tb)
		if err != nil {
			tb.Fatal(err)
		}
		vs = append(vs, stack.PublishedVersion(tb, out))
	}
	return vs
}

func TestRollbackPinsAndUnpinResumes(t *testing.T) {
	t.Parallel()
	e := start(t)
	vs := e.publishGens(t, 1, 2, 3)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()

	// Back to the previous version: the API serves it within one pointer refresh of
	// the flip (the command's own start, its connections and lease, not counted).
	out, err := e.syncerCmd(t, "rollback", "--previous", "--reason", "bad import")
	before := time.Now()
	if err != nil || !strings.Contains(out, "rolled back from "+vs[2]+" to "+vs[1]) {
		t.Fatalf("rollback --previous = %q, %v", out, err)
	}
	r := e.awaitVersion(t, docPath("things", "plain"), vs[1])
	// Within seconds; the figure itself is make bench's (a loaded machine's pointer
	// refresh can lag, and the test runs beside others).
	if took := time.Since(before); gen(t, r.body) != 2 || took > 10*time.Second {
		t.Errorf("after rollback the API served gen %d after %s", gen(t, r.body), took)
	}
	if m, _ := st.ReadManifest(ctx, "e2e", snapshot.Version(vs[2])); m.State != snapshot.StateRolledBack {
		t.Errorf("abandoned version is %s; want rolled_back", m.State)
	}
	var cur struct {
		Pinned    bool   `json:"pinned"`
		PinReason string `json:"pin_reason"`
	}
	mustJSON(t, e.get(t, "/v1/versions/current"), &cur)
	if !cur.Pinned || cur.PinReason != "bad import" {
		t.Errorf("/v1/versions/current = %+v; want pinned with the reason", cur)
	}

	// While pinned, a sync (as a scheduled tick would) publishes nothing.
	testenv.Exec(t, e.DSN, `UPDATE things SET gen = 4`)
	out, err = e.sync(t)
	if err != nil || !strings.HasPrefix(out, "pinned") {
		t.Errorf("sync while pinned = %q, %v; want it to say pinned and publish nothing", out, err)
	}
	if p, _ := st.ReadPointer(ctx, "e2e"); string(p.Version) != vs[1] {
		t.Errorf("pointer moved to %s while pinned", p.Version)
	}

	// Back to a named version, from the pinned state.
	if out, err := e.syncerCmd(t, "rollback", "--to", vs[0], "--reason", "further back"); err != nil {
		t.Fatalf("rollback --to: %v %s", err, out)
	}
	e.awaitVersion(t, docPath("things", "plain"), vs[0])

	// Refusals change nothing.
	ptrBefore, _ := st.ReadPointer(ctx, "e2e")
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"rollback", "--to", "7b1e4c1a-3f7e-4c57-9d0c-0a5d2c1f8e21-1700000000000", "--reason", "x"}, "does not exist"},
		{[]string{"rollback", "--to", vs[2], "--reason", "x"}, "rolled back away from"},
		{[]string{"rollback", "--to", vs[0], "--reason", "x"}, "already the current version"},
		{[]string{"rollback", "--previous"}, "reason is required"},
		{[]string{"rollback", "--to", "not-a-version", "--reason", "x"}, "version"},
	}
	for _, tc := range refusals {
		out, err := e.syncerCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v = %q, %v; want a refusal saying %q", tc.args, out, err, tc.want)
		}
	}
	// An unsealed (failed) target.
	failed := snapshot.Manifest{Dataset: "e2e", Version: snapshot.NewVersionGen([16]byte{7}, nil).Next(), State: snapshot.StateWriting, StartedAt: time.Now()}
	if err := st.CreateManifest(ctx, failed); err != nil {
		t.Fatal(err)
	}
	failed.State = snapshot.StateFailed
	if err := st.UpdateManifest(ctx, failed, snapshot.StateWriting); err != nil {
		t.Fatal(err)
	}
	if _, err := e.syncerCmd(t, "rollback", "--to", string(failed.Version), "--reason", "x"); err == nil || !strings.Contains(err.Error(), "is failed") {
		t.Errorf("rollback to a failed version = %v; want refused", err)
	}
	if p, _ := st.ReadPointer(ctx, "e2e"); p.Version != ptrBefore.Version || p.Fence < ptrBefore.Fence {
		t.Errorf("refusals moved the pointer: %s → %s", ptrBefore.Version, p.Version)
	}
	// --force allows the version that was rolled back away from.
	if _, err := e.syncerCmd(t, "rollback", "--to", vs[2], "--reason", "it was fine", "--force"); err != nil {
		t.Errorf("forced rollback to a rolled-back version: %v", err)
	}

	// Unpin: the next sync publishes again.
	if out, err := e.syncerCmd(t, "unpin", "--reason", "fixed upstream"); err != nil || !strings.Contains(out, "unpinned") {
		t.Fatalf("unpin = %q, %v", out, err)
	}
	if _, err := e.syncerCmd(t, "unpin", "--reason", "again"); err == nil || !strings.Contains(err.Error(), "not pinned") {
		t.Errorf("second unpin = %v; want refused", err)
	}
	out, err = e.sync(t)
	if err != nil || !strings.HasPrefix(out, "published") {
		t.Errorf("sync after unpin = %q, %v; want a publish", out, err)
	}

	// The audit trail has all of it, newest first; versions, inspect and diff work.
	out, err = e.syncerCmd(t, "history", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var hist []snapshot.AuditEntry
	if err := json.Unmarshal([]byte(out), &hist); err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, h := range hist {
		actions = append(actions, string(h.Action))
		if h.By == "" || h.Fence == 0 {
			t.Errorf("audit entry without who or token: %+v", h)
		}
	}
	if want := "flip unpin rollback rollback rollback flip flip flip"; strings.Join(actions, " ") != want {
		t.Errorf("history = %s; want %s", strings.Join(actions, " "), want)
	}
	if out, err := e.syncerCmd(t, "versions"); err != nil || !strings.Contains(out, "current") || !strings.Contains(out, "rolled_back") {
		t.Errorf("versions = %q, %v", out, err)
	}
	if out, err := e.syncerCmd(t, "inspect", vs[0]); err != nil || !strings.Contains(out, `"version": "`+vs[0]+`"`) {
		t.Errorf("inspect = %q, %v", out, err)
	}
	out, err = e.syncerCmd(t, "diff", vs[0], vs[2], "--collection", "things")
	if err != nil || !strings.Contains(out, fmt.Sprintf("~%d changed", len(awkwardIDs))) {
		t.Errorf("diff = %q, %v; want every thing changed", out, err)
	}
	if out, err := e.syncerCmd(t, "diff", vs[0], vs[1], "--collection", "flags"); err != nil || !strings.Contains(out, "unchanged (same digest)") {
		t.Errorf("diff of an unchanged collection = %q, %v", out, err)
	}
}

// TestRollbackRefusesExpiringTarget: a target within the safety margin of its TTL.
func TestRollbackRefusesExpiringTarget(t *testing.T) {
	t.Parallel()
	e := start(t)
	writeConfig(t, e, strings.Replace(config, "ttl: 1h", "ttl: 2s", 1))
	old := e.publishGens(t, 1)[0]
	writeConfig(t, e, config) // an hour, which the table's rules must allow
	if out, err := e.syncerCmd(t, "retention", "--apply"); err != nil {
		t.Fatalf("syncer retention --apply = %v\n%s", err, out)
	}
	e.publishGens(t, 2)
	// Wait until old is within its margin (a tenth of 2s) of expiring.
	if wait := time.Until(snapshot.Version(old).Time().Add(1900 * time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	_, err := e.syncerCmd(t, "rollback", "--to", old, "--reason", "x")
	if err == nil || !strings.Contains(err.Error(), "expires in") {
		t.Errorf("rollback to an expiring version = %v; want refused", err)
	}
}

// TestRollbackRacesSyncs: syncs keep flipping while rollbacks run; once a rollback
// reports success the pointer is on its target and stays there.
func TestRollbackRacesSyncs(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.publishGens(t, 1, 2)
	st := testenv.Store(t, testenv.StoreConfig(e.Bigtable))
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	var syncs atomic.Int64 // the racing syncs that ended
	go func() {
		defer close(done)
		for g := 10; ; g++ {
			select {
			case <-stop:
				return
			default:
			}
			testenv.Exec(t, e.DSN, fmt.Sprintf(`UPDATE things SET gen = %d`, g))
			_, _ = e.sync(t) // pinned or fenced syncs fail or say pinned: both fine
			syncs.Add(1)
		}
	}()
	// The racing syncs end before the environment does, however the test ends.
	var halted sync.Once
	halt := func() { halted.Do(func() { close(stop) }); <-done }
	t.Cleanup(halt)
	for i := range 5 {
		out, err := e.syncerCmd(t, "rollback", "--previous", "--reason", fmt.Sprintf("race %d", i), "--force")
		if err != nil {
			if strings.Contains(err.Error(), "no previous") || strings.Contains(err.Error(), "already the current") {
				continue
			}
			t.Fatalf("rollback %d: %v", i, err)
		}
		f := strings.Fields(out)
		to := ""
		for j := range f[:len(f)-1] {
			if f[j] == "to" && strings.Count(f[j+1], "-") == 5 {
				to = f[j+1]
			}
		}
		// Two racing syncs end after the rollback, and the pointer has not moved.
		after := syncs.Load()
		testenv.Eventually(t, time.Minute, func() error {
			if n := syncs.Load(); n < after+2 {
				return fmt.Errorf("%d syncs ended after rollback %d; waiting for 2", n-after, i)
			}
			return nil
		})
		if p, err := st.ReadPointer(ctx, "e2e"); err != nil || string(p.Version) != to || !p.Pinned {
			t.Fatalf("after rollback %d to %s the pointer is %s (pinned %v)", i, to, p.Version, p.Pinned)
		}
		if _, err := e.syncerCmd(t, "unpin", "--reason", "next round"); err != nil {
			t.Fatal(err)
		}
	}
	halt()
}

// TestAdminEndpoints: the metadata API's rollback and unpin with the admin token.
func TestAdminEndpoints(t *testing.T) {
	t.Parallel()
	e := start(t)
	vs := e.publishGens(t, 1, 2)
	e.StopAPI()
	e.startAPI(t, cli.EnvAdminToken, "s3cret")
	base := e.Base
	post := func(path, token, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, b := callAPI(t, req)
		return resp.StatusCode, string(b)
	}
	if code, _ := post("/v1/admin/rollback", "", `{"previous": true, "reason": "x"}`); code != 401 {
		t.Errorf("no token = %d; want 401", code)
	}
	if code, _ := post("/v1/admin/rollback", "wrong", `{"previous": true, "reason": "x"}`); code != 401 {
		t.Errorf("wrong token = %d; want 401", code)
	}
	code, body := post("/v1/admin/rollback", "s3cret", `{"previous": true, "reason": "via api"}`)
	if code != 200 || !strings.Contains(body, `"to":"`+vs[0]+`"`) {
		t.Fatalf("rollback via the API = %d %s", code, body)
	}
	if code, body := post("/v1/admin/rollback", "s3cret", `{"to": "`+vs[0]+`", "reason": "again"}`); code != 422 {
		t.Errorf("refused rollback = %d %s; want 422", code, body)
	}
	if code, body := post("/v1/admin/unpin", "s3cret", `{"reason": "done"}`); code != 200 {
		t.Errorf("unpin = %d %s", code, body)
	}
	if code, _ := post("/v1/admin/unpin", "s3cret", `{"reason": "done"}`); code != 422 {
		t.Errorf("unpin when not pinned = %d; want 422", code)
	}
	out, _ := e.syncerCmd(t, "history")
	if !strings.Contains(out, "api-admin@127.0.0.1") || !strings.Contains(out, "via api") {
		t.Errorf("history lacks the API's rollback:\n%s", out)
	}
	page := e.get(t, "/").body
	if !strings.Contains(string(page), "<svg") || !strings.Contains(string(page), "rollback") {
		t.Errorf("status page lacks the chart or the rollback:\n%.400s", page)
	}
}

// The API's rollback counts a target's TTL left with the table's GC rule, as the
// CLI's does: on a table whose rule keeps documents a minute, the previous version
// of a dataset whose ttl is an hour expires within the safety margin (a tenth of the
// ttl), and the rollback is refused (422), changing nothing.
func TestAdminRollbackCountsTheGCRule(t *testing.T) {
	t.Parallel()
	e := start(t)
	vs := e.publishGens(t, 1, 2)
	e.StopAPI()
	e.startAPI(t, cli.EnvAdminToken, "s3cret")
	testenv.SetDocumentsGCRule(t, e.Bigtable, bigtable.MaxAgePolicy(time.Minute))
	req, _ := http.NewRequest(http.MethodPost, e.Base+"/v1/admin/rollback", strings.NewReader(`{"previous": true, "reason": "x"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, body := callAPI(t, req)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "expire") {
		t.Errorf("rollback to a version the GC rule collects = %d %s; want 422 saying it expires", resp.StatusCode, body)
	}
	if r := e.get(t, "/v1/versions/current"); !strings.Contains(string(r.body), vs[1]) {
		t.Errorf("after the refused rollback the current version is %s; want %s", r.body, vs[1])
	}
}
