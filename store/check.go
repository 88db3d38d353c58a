package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"cloud.google.com/go/bigtable"
	btapb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SchemaReport is what CheckSchema found about the table the config names.
type SchemaReport struct {
	// Table is the table's name; Exists whether it exists (the first sync creates it
	// when it does not).
	Table  string
	Exists bool
	// Families describes each column family snapflip uses, in name order.
	Families []FamilyReport
	// Routing is the app profile's routing ("single-cluster c1", "multi-cluster", …),
	// or RoutingNotChecked against the emulator.
	Routing string
	// Problems are what would make a sync fail, each a sentence; empty when a sync
	// could succeed. What a sync sets up by itself (a missing table or family) is not
	// a problem, nor a rule that keeps cells longer than the config needs; a rule that
	// keeps documents or manifests shorter is.
	Problems []string
}

// FamilyReport is one column family: its GC rule as the config implies it and as the
// table has it ("" when the family does not exist). For the families whose life
// follows the TTL (documents and manifests), Need is how long the config needs a
// cell kept and Keep how long the table's rule keeps it (store.MinLife); both are 0
// for the others.
type FamilyReport struct {
	Name, Holds, Want, Have string
	Need, Keep              time.Duration
}

// Short reports whether the table's rule keeps cells shorter than the config needs:
// a sync refuses to start.
func (f FamilyReport) Short() bool { return f.Have != "" && f.Keep < f.Need }

// OK reports whether a sync could succeed.
func (r SchemaReport) OK() bool { return len(r.Problems) == 0 }

// familyHolds says what each family holds, for reports.
var familyHolds = map[string]string{
	famDocs: "documents", famManifest: "manifests", famControl: "pointer and leases",
	famSlots: "tick claims", famAudit: "audit trail",
}

// CheckSchema reports whether the table exists with the column families and GC rules
// the config implies, and, outside the emulator, whether the app profile routes to a
// single cluster with transactional writes (judgeAppProfile says why that matters). It writes nothing. Its error is for
// a Bigtable it could not ask at all.
func (s *Store) CheckSchema(ctx context.Context) (SchemaReport, error) {
	// Each question gets op_timeout, whatever the caller's deadline: an unreachable
	// Bigtable is a finding to report promptly.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	r := SchemaReport{Table: s.cfg.Table}
	info, err := s.admin.TableInfo(ctx, s.cfg.Table)
	switch {
	case status.Code(err) == codes.NotFound:
		// The first sync creates it.
	case err != nil:
		return r, s.wrap(err, "read table %s", s.cfg.Table)
	default:
		r.Exists = true
	}
	have := map[string]string{}
	keep := map[string]time.Duration{}
	if info != nil {
		have = familyRules(info)
		for fam, rule := range have {
			if rule == "" {
				have[fam] = "(none)"
			}
		}
		ret := retentionOf(s.cfg.Table, info)
		for _, f := range ret.families() {
			keep[f.Family] = f.Keep
		}
		if err := ret.Check(s.cfg); err != nil {
			r.Problems = append(r.Problems, "bigtable: "+err.Error()+": a sync refuses to start until the rules keep them as long "+
				"(syncer retention --apply sets them, unless a dataset sharing the table needs them longer)")
		}
	}
	pols, need := s.cfg.policies(), s.cfg.needs()
	for _, fam := range slices.Sorted(maps.Keys(pols)) {
		r.Families = append(r.Families, FamilyReport{Name: fam, Holds: familyHolds[fam], Want: pols[fam].String(), Have: have[fam],
			Need: need[fam], Keep: keep[fam]})
	}
	routing, problem, err := s.AppProfileRouting(ctx)
	r.Routing = routing
	switch {
	case err != nil:
		r.Problems = append(r.Problems, "bigtable: "+err.Error())
	case problem != "":
		r.Problems = append(r.Problems, "bigtable: "+problem)
	}
	return r, nil
}

// AppProfileRouting reports how the configured app profile routes ("single-cluster
// c1", "multi-cluster", …; RoutingNotChecked against the emulator) and, when that
// breaks snapflip's guarantees, why, as a sentence ("" when it keeps them). Its error
// is for a profile it could not read within op_timeout (routing "unknown").
func (s *Store) AppProfileRouting(ctx context.Context) (routing, problem string, err error) {
	if s.cfg.EmulatorHost != "" {
		return RoutingNotChecked, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	profile := s.cfg.AppProfile
	if profile == "" {
		profile = "default"
	}
	iac, err := bigtable.NewInstanceAdminClient(ctx, s.cfg.Project, s.opts...)
	if err != nil {
		return "unknown", "", fmt.Errorf("bigtable instance admin client: %w", err)
	}
	defer iac.Close()
	p, err := iac.GetAppProfile(ctx, s.cfg.Instance, profile)
	if err != nil {
		return "unknown", "", fmt.Errorf("cannot read app profile %q of instance %s/%s: %w", profile, s.cfg.Project, s.cfg.Instance, err)
	}
	routing, problem = judgeAppProfile(profile, p)
	return routing, problem, nil
}

// RoutingNotChecked is SchemaReport.Routing against the emulator, which has no app
// profiles (nor replication).
const RoutingNotChecked = "not checked (emulator)"

// judgeAppProfile says how the app profile named name routes and, when that breaks
// snapflip's guarantees, why, as a sentence ("" when it keeps them). Only single-cluster
// routing with transactional writes keeps them: conditional writes (the pointer flip,
// leases, tick claims) need both, and replication between clusters keeps no order
// across rows, so a profile that may read another cluster could see a pointer before
// the documents it names.
func judgeAppProfile(name string, p *btapb.AppProfile) (routing, problem string) {
	const fix = ": use one profile with single-cluster routing and transactional writes for the syncer and the API " +
		"(docs/configuration.md#bigtable)"
	switch {
	case p.GetDataBoostIsolationReadOnly() != nil:
		return "data boost (read-only)", fmt.Sprintf("app profile %q uses Data Boost, which is read-only and may read writes late%s", name, fix)
	case p.GetMultiClusterRoutingUseAny() != nil:
		return "multi-cluster", fmt.Sprintf("app profile %q routes to several clusters, which accept conditional writes each "+
			"on its own and replicate rows in no order%s", name, fix)
	case p.GetSingleClusterRouting() == nil:
		return "unknown", fmt.Sprintf("app profile %q has no routing policy this check knows%s", name, fix)
	case !p.GetSingleClusterRouting().GetAllowTransactionalWrites():
		return "single-cluster " + p.GetSingleClusterRouting().GetClusterId() + ", transactional writes off",
			fmt.Sprintf("app profile %q does not allow transactional writes, which the pointer flip, leases and tick claims are%s", name, fix)
	}
	return "single-cluster " + p.GetSingleClusterRouting().GetClusterId(), ""
}
