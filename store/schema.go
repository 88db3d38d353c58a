package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snapflip/snapflip/snapshot"
)

// policies returns the GC rule of each column family for the configured TTL.
func (c Config) policies() map[string]bigtable.GCPolicy {
	c = c.withDefaults()
	return map[string]bigtable.GCPolicy{
		famDocs:     bigtable.UnionPolicy(bigtable.MaxAgePolicy(c.TTL), bigtable.MaxVersionsPolicy(1)),
		famManifest: bigtable.MaxAgePolicy(c.TTL + c.manifestGrace()),
		famControl:  bigtable.MaxVersionsPolicy(1),
		famSlots:    bigtable.MaxAgePolicy(c.SlotRetention),
		famAudit:    bigtable.MaxAgePolicy(max(c.AuditRetention, time.Hour)),
	}
}

// needs returns how long the config needs each family whose life follows the TTL to
// keep a cell: documents the TTL, manifests the TTL and the grace, so that a
// version's history outlives its data.
func (c Config) needs() map[string]time.Duration {
	c = c.withDefaults()
	return map[string]time.Duration{famDocs: c.TTL, famManifest: c.TTL + c.manifestGrace()}
}

// Wanted returns the rules the config asks for documents and manifests, as the
// retention of a table made for it.
func (c Config) Wanted() Retention {
	pols := c.policies()
	rule := func(fam string) FamilyRule {
		return FamilyRule{Family: fam, Rule: pols[fam], Keep: MinLife(pols[fam])}
	}
	return Retention{Table: c.Table, Docs: rule(famDocs), Manifests: rule(famManifest)}
}

// familyRules returns each column family of a table with its GC rule as Bigtable
// reports it.
func familyRules(info *bigtable.TableInfo) map[string]string {
	rules := map[string]string{}
	for _, f := range info.FamilyInfos {
		rules[f.Name] = f.GCPolicy
	}
	return rules
}

// FamilyRule is a column family's GC rule as Bigtable reports it, and the least time
// the rule keeps a cell.
type FamilyRule struct {
	Family string
	// Rule is the family's rule; nil when the family does not exist.
	Rule bigtable.GCPolicy
	// Keep is MinLife(Rule); 0 when the family does not exist.
	Keep time.Duration
}

// String writes the rule as Bigtable does, or says that there is none.
func (f FamilyRule) String() string {
	switch {
	case f.Rule == nil:
		return "missing"
	case f.Rule.String() == "":
		return "no rule"
	}
	return f.Rule.String()
}

// Retention is what a table's GC rules keep of the families whose life follows the
// TTL: documents (family d) and manifests (family m).
type Retention struct {
	Table           string
	Docs, Manifests FamilyRule
	// Families are all the table's families, in name order.
	Families []FamilyRule
}

// retentionOf reads the rules of families d and m from a table's info.
func retentionOf(table string, info *bigtable.TableInfo) Retention {
	r := Retention{Table: table, Docs: FamilyRule{Family: famDocs}, Manifests: FamilyRule{Family: famManifest}}
	for _, f := range info.FamilyInfos {
		rule := FamilyRule{Family: f.Name, Rule: f.FullGCPolicy, Keep: MinLife(f.FullGCPolicy)}
		if rule.Rule == nil {
			rule.Rule = bigtable.NoGcPolicy()
		}
		r.Families = append(r.Families, rule)
		switch f.Name {
		case famDocs:
			r.Docs = rule
		case famManifest:
			r.Manifests = rule
		}
	}
	slices.SortFunc(r.Families, func(a, b FamilyRule) int { return strings.Compare(a.Family, b.Family) })
	return r
}

// Holds says what snapflip keeps in a family, or "" for a family it does not use.
func Holds(family string) string { return familyHolds[family] }

// families returns d and m, in that order.
func (r Retention) families() []FamilyRule { return []FamilyRule{r.Docs, r.Manifests} }

// Check reports whether the rules keep cells as long as cfg needs: documents for
// cfg.TTL, manifests for cfg.TTL + cfg.ManifestGrace. It returns nil, or a
// *RetentionError naming each family that keeps its cells shorter. A rule that keeps
// them longer is fine: another dataset sharing the table may need it.
func (r Retention) Check(cfg Config) error {
	need := cfg.needs()
	e := &RetentionError{Table: r.Table, TTL: cfg.TTL}
	for _, f := range r.families() {
		if f.Keep < need[f.Family] {
			e.Short = append(e.Short, Shortfall{FamilyRule: f, Need: need[f.Family]})
		}
	}
	if len(e.Short) > 0 {
		return e
	}
	return nil
}

// Longer returns the families whose rules keep cells longer than cfg needs.
func (r Retention) Longer(cfg Config) []FamilyRule {
	need := cfg.needs()
	var out []FamilyRule
	for _, f := range r.families() {
		if f.Keep > need[f.Family] {
			out = append(out, f)
		}
	}
	return out
}

// Shortfall is a family whose rule keeps cells shorter than a config needs.
type Shortfall struct {
	FamilyRule
	Need time.Duration
}

// RetentionError reports a table whose GC rules keep cells shorter than a TTL needs:
// a version could be collected while it is served. It wraps snapshot.ErrRetention.
type RetentionError struct {
	Table string
	TTL   time.Duration
	Short []Shortfall
}

func (e *RetentionError) Error() string {
	var keeps, needs []string
	for _, s := range e.Short {
		keeps = append(keeps, fmt.Sprintf("%s %s (family %s, GC rule %s)", familyHolds[s.Family], FormatLife(s.Keep), s.Family, s))
		needs = append(needs, fmt.Sprintf("%s %s", familyHolds[s.Family], FormatLife(s.Need)))
	}
	return fmt.Sprintf("table %s keeps %s, but ttl %s needs %s kept", e.Table, strings.Join(keeps, " and "),
		FormatLife(e.TTL), strings.Join(needs, " and "))
}

func (e *RetentionError) Unwrap() error { return snapshot.ErrRetention }

// Retention reads the GC rules of the table's documents and manifests: one admin read
// (TableInfo), no write.
func (s *Store) Retention(ctx context.Context) (Retention, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	info, err := s.admin.TableInfo(ctx, s.cfg.Table)
	if err != nil {
		return Retention{}, s.wrap(err, "read table %s", s.cfg.Table)
	}
	return retentionOf(s.cfg.Table, info), nil
}

// EnsureSchema creates the table with its column families and their GC rules if it is
// missing, and adds a missing family with its rule. It never changes the rule of a
// family that exists: a rule set by an operator, or by a dataset sharing the table
// with a longer TTL, stays. It returns the retention the table has then, for the
// caller to Check. A table that has every family gets no admin write: replicas may
// start often, and Bigtable's admin operations are rate-limited.
func (s *Store) EnsureSchema(ctx context.Context) (Retention, error) {
	info, err := s.admin.TableInfo(ctx, s.cfg.Table)
	if status.Code(err) == codes.NotFound {
		err = s.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: s.cfg.Table, Families: s.cfg.policies()})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return Retention{}, s.wrap(err, "create table %s", s.cfg.Table)
		}
		info, err = s.admin.TableInfo(ctx, s.cfg.Table)
	}
	if err != nil {
		return Retention{}, s.wrap(err, "read table %s", s.cfg.Table)
	}
	have := familyRules(info)
	var errs []error
	created := false
	for fam, policy := range s.cfg.policies() {
		if _, ok := have[fam]; ok {
			continue
		}
		err := s.admin.CreateColumnFamilyWithConfig(ctx, s.cfg.Table, fam, bigtable.Family{GCPolicy: policy})
		switch {
		case err == nil:
			created = true
		case status.Code(err) == codes.AlreadyExists:
			// Created meanwhile by another process, perhaps with another rule: it
			// stays, and is read again below.
			created = true
		default:
			errs = append(errs, s.wrap(err, "create column family %s with GC rule %s", fam, policy))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Retention{}, fmt.Errorf("ensure schema of table %s: %w", s.cfg.Table, err)
	}
	if created {
		if info, err = s.admin.TableInfo(ctx, s.cfg.Table); err != nil {
			return Retention{}, s.wrap(err, "read table %s", s.cfg.Table)
		}
	}
	return retentionOf(s.cfg.Table, info), nil
}

// RuleChange sets one family's GC rule.
type RuleChange struct {
	// From is the family's rule before; To the rule it gets.
	From FamilyRule
	To   bigtable.GCPolicy
}

// Refusal names a dataset whose need a planned rule would not meet.
type Refusal struct {
	// Family and Keep are the family and the least life its planned rule guarantees.
	Family string
	Keep   time.Duration
	Need   snapshot.RetentionNeed
}

func (r Refusal) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dataset %s needs %s kept %s, longer than the %s the new rule of family %s keeps them: its current version %s",
		r.Need.Dataset, familyHolds[r.Family], FormatLife(r.Need.Keep()), FormatLife(r.Keep), r.Family, r.Need.Version)
	if r.Need.Pinned {
		b.WriteString(" (pinned)")
	}
	fmt.Fprintf(&b, " was written with ttl %s and its oldest layer is %s old", FormatLife(r.Need.TTL), FormatLife(r.Need.Age.Round(time.Second)))
	return b.String()
}

// RetentionPlan is what setting the GC rules of a config would do: the changes, or
// the datasets that refuse them.
type RetentionPlan struct {
	// Table is the table the plan is for.
	Table string
	// Changes are the families whose rule differs from what the config asks for.
	Changes []RuleChange
	// Refusals are the datasets sharing the table whose current version a changed
	// rule would collect too early; when there are any the plan must not be applied.
	Refusals []Refusal
}

// PlanRetention returns what setting the rules cfg asks for documents and manifests
// would change on a table whose rules are have, and which of the datasets sharing the
// table (needs) would refuse it: a changed rule must keep cells for each dataset's
// RetentionNeed.Keep. A rule as the config asks is no change, and not checked.
func PlanRetention(have Retention, cfg Config, needs []snapshot.RetentionNeed) RetentionPlan {
	want := cfg.policies()
	plan := RetentionPlan{Table: have.Table}
	for _, f := range have.families() {
		to := want[f.Family]
		if f.Rule != nil && f.Rule.String() == to.String() {
			continue
		}
		plan.Changes = append(plan.Changes, RuleChange{From: f, To: to})
		keep := MinLife(to)
		for _, n := range needs {
			if keep < n.Keep() {
				plan.Refusals = append(plan.Refusals, Refusal{Family: f.Family, Keep: keep, Need: n})
			}
		}
	}
	return plan
}

// ApplyRetention sets the rules of a plan without refusals, one admin write per
// family (a missing family is created with its rule). It refuses a plan with
// refusals, changing nothing.
func (s *Store) ApplyRetention(ctx context.Context, plan RetentionPlan) error {
	if len(plan.Refusals) > 0 {
		return fmt.Errorf("refusing to set the GC rules of table %s: %s: %w", s.cfg.Table, plan.Refusals[0], snapshot.ErrRetention)
	}
	if plan.Table != s.cfg.Table {
		return fmt.Errorf("%w plan for table %s applied to table %s", snapshot.ErrInvalid, plan.Table, s.cfg.Table)
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	for _, c := range plan.Changes {
		var err error
		if c.From.Rule == nil {
			err = s.admin.CreateColumnFamilyWithConfig(ctx, s.cfg.Table, c.From.Family, bigtable.Family{GCPolicy: c.To})
		} else {
			err = s.admin.SetGCPolicy(ctx, s.cfg.Table, c.From.Family, c.To)
		}
		if err != nil {
			return s.wrap(err, "set GC rule of family %s from %s to %s", c.From.Family, c.From, c.To)
		}
	}
	return nil
}
