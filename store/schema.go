package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cloud.google.com/go/bigtable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// policies returns the GC rule of each column family for the configured TTL.
func (s *Store) policies() map[string]bigtable.GCPolicy {
	return map[string]bigtable.GCPolicy{
		famDocs:     bigtable.UnionPolicy(bigtable.MaxAgePolicy(s.cfg.TTL), bigtable.MaxVersionsPolicy(1)),
		famManifest: bigtable.MaxAgePolicy(s.cfg.TTL + s.cfg.ManifestGrace),
		famControl:  bigtable.MaxVersionsPolicy(1),
		famSlots:    bigtable.MaxAgePolicy(s.cfg.SlotRetention),
		famAudit:    bigtable.MaxAgePolicy(max(s.cfg.AuditRetention, time.Hour)),
	}
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

// EnsureSchema creates the table with its column families and their GC rules if it is
// missing, adds a missing family, and sets a family's GC rule where it differs from the
// configured one (so a changed TTL takes effect). A table already as configured gets
// no admin write: replicas may start often, and Bigtable's admin operations are
// rate-limited.
func (s *Store) EnsureSchema(ctx context.Context) error {
	info, err := s.admin.TableInfo(ctx, s.cfg.Table)
	if status.Code(err) == codes.NotFound {
		err = s.admin.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: s.cfg.Table, Families: s.policies()})
		if err != nil && status.Code(err) != codes.AlreadyExists {
			return s.wrap(err, "create table %s", s.cfg.Table)
		}
		info, err = s.admin.TableInfo(ctx, s.cfg.Table)
	}
	if err != nil {
		return s.wrap(err, "read table %s", s.cfg.Table)
	}
	have := familyRules(info)
	var errs []error
	for fam, policy := range s.policies() {
		rule, ok := have[fam]
		if ok && rule == policy.String() {
			continue
		}
		if !ok {
			err := s.admin.CreateColumnFamilyWithConfig(ctx, s.cfg.Table, fam, bigtable.Family{GCPolicy: policy})
			if err == nil {
				continue
			}
			if status.Code(err) != codes.AlreadyExists {
				errs = append(errs, s.wrap(err, "create column family %s with GC rule %s", fam, policy))
				continue
			}
			// Created meanwhile by another process, perhaps with another rule: set it.
		}
		if err := s.admin.SetGCPolicy(ctx, s.cfg.Table, fam, policy); err != nil {
			errs = append(errs, s.wrap(err, "set GC rule of family %s to %s", fam, policy))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ensure schema of table %s: %w", s.cfg.Table, err)
	}
	return nil
}
