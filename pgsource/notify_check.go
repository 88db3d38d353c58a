package pgsource

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CheckNotify reports, changing nothing, what would keep watch.mode: notify from
// setting itself up when the syncer starts: a standby for a source, a watched table
// without its trigger on which the role lacks the TRIGGER privilege, an installed
// function the syncer would not trust, or no function and no CREATE to make one. Each
// problem is a sentence, as the syncer's own error would say it. The error is for not
// being able to check at all.
func (s *Source) CheckNotify(ctx context.Context) ([]string, error) {
	conn, err := pgx.ConnectConfig(ctx, s.cfg)
	if err != nil {
		return nil, s.connectError(err)
	}
	defer closeConn(ctx, conn)
	var problems []string
	var standby bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return nil, err
	}
	if standby {
		problems = append(problems, fmt.Sprintf("%v: the source is a standby, where no trigger can be created and "+
			"no notification is sent: point the syncer at the primary, or use watch.mode: stats", ErrNotifySetup))
	}
	oids, err := watchedTables(ctx, conn, s.collections)
	if err != nil {
		return nil, err
	}
	targets, _, err := notifyTargets(ctx, conn, oids)
	if err != nil {
		return nil, err
	}
	var denied []string
	for _, t := range targets {
		if t.triggerFn == 0 && !t.mayCreate {
			denied = append(denied, t.name)
		}
	}
	if len(denied) > 0 {
		problems = append(problems, deniedError(ctx, conn, denied).Error())
	}
	f, err := lookupNotifyFunction(ctx, conn)
	if err != nil {
		return nil, err
	}
	if f.oid != 0 {
		if err := f.trusted(); err != nil {
			problems = append(problems, err.Error())
		}
		return problems, nil
	}
	var schemaExists, mayCreate bool
	if err := conn.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL,
			CASE WHEN to_regnamespace($1) IS NOT NULL THEN has_schema_privilege($1, 'CREATE')
				ELSE has_database_privilege(current_database(), 'CREATE') END`, NotifySchema).Scan(&schemaExists, &mayCreate); err != nil {
		return nil, err
	}
	switch {
	case !mayCreate && schemaExists:
		problems = append(problems, fmt.Sprintf("%v: %s is not installed and the role may not create it: it needs CREATE on "+
			"schema %s (or a DBA can install the function: see README)", ErrNotifySetup, NotifyFunction, NotifySchema))
	case !mayCreate:
		problems = append(problems, fmt.Sprintf("%v: %s is not installed and the role may not create schema %s for it: it "+
			"needs CREATE on the database, or a DBA can create the schema and grant CREATE on it (or install the function: "+
			"see docs/freshness.md)", ErrNotifySetup, NotifyFunction, NotifySchema))
	}
	return problems, nil
}
