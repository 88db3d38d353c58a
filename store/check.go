package store

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"cloud.google.com/go/bigtable"
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
	// Routing is the app profile's routing ("single-cluster", "multi-cluster"), or why
	// it was not checked (the emulator has no app profiles).
	Routing string
	// Problems are what would make a sync fail, each a sentence; empty when a sync
	// could succeed. What a sync sets up by itself (a missing table or family, a GC
	// rule that differs from the config's) is not a problem.
	Problems []string
}

// FamilyReport is one column family: its GC rule as the config implies it and as the
// table has it ("" when the family does not exist).
type FamilyReport struct {
	Name, Holds, Want, Have string
}

// OK reports whether a sync could succeed.
func (r SchemaReport) OK() bool { return len(r.Problems) == 0 }

// familyHolds says what each family holds, for reports.
var familyHolds = map[string]string{
	famDocs: "documents", famManifest: "manifests", famControl: "pointer and leases",
	famSlots: "slot claims", famAudit: "audit trail",
}

// CheckSchema reports whether the table exists with the column families and GC rules
// the config implies, and, outside the emulator, whether the app profile routes to a
// single cluster, which conditional writes need. It writes nothing. Its error is for
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
	if info != nil {
		have = familyRules(info)
		for fam, rule := range have {
			if rule == "" {
				have[fam] = "(none)"
			}
		}
	}
	pols := s.policies()
	for _, fam := range slices.Sorted(maps.Keys(pols)) {
		r.Families = append(r.Families, FamilyReport{Name: fam, Holds: familyHolds[fam], Want: pols[fam].String(), Have: have[fam]})
	}
	if s.cfg.EmulatorHost != "" {
		r.Routing = "not checked: the emulator has no app profiles"
		return r, nil
	}
	profile := s.cfg.AppProfile
	if profile == "" {
		profile = "default"
	}
	iac, err := bigtable.NewInstanceAdminClient(ctx, s.cfg.Project, s.opts...)
	if err != nil {
		return r, fmt.Errorf("bigtable instance admin client: %w", err)
	}
	defer iac.Close()
	p, err := iac.GetAppProfile(ctx, s.cfg.Instance, profile)
	if err != nil {
		r.Routing = "unknown"
		r.Problems = append(r.Problems, fmt.Sprintf("bigtable: cannot read app profile %q of instance %s/%s: %v",
			profile, s.cfg.Project, s.cfg.Instance, err))
		return r, nil
	}
	if p.GetSingleClusterRouting() != nil {
		r.Routing = "single-cluster"
	} else {
		r.Routing = "multi-cluster"
		r.Problems = append(r.Problems, fmt.Sprintf("bigtable: app profile %q routes to several clusters; conditional writes "+
			"(the pointer flip, leases, slot claims) need single-cluster routing: set bigtable.app_profile to one that has it", profile))
	}
	return r, nil
}
