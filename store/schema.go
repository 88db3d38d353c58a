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
	have := map[string]string{}
	for _, f := range info.FamilyInfos {
		have[f.Name] = f.GCPolicy
	}
	var errs []error
	for fam, policy := range s.policies() {
		rule, ok := have[fam]
		if !ok {
			err := s.admin.CreateColumnFamily(ctx, s.cfg.Table, fam)
			if err != nil && status.Code(err) != codes.AlreadyExists {
				errs = append(errs, s.wrap(err, "create column family %s", fam))
				continue
			}
		}
		if ok && rule == policy.String() {
			continue
		}
		if err := s.admin.SetGCPolicy(ctx, s.cfg.Table, fam, policy); err != nil {
			errs = append(errs, s.wrap(err, "set GC policy of family %s", fam))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ensure schema of table %s: %w", s.cfg.Table, err)
	}
	return nil
}
