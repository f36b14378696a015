package conf

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ParseQueryExecMode maps database.queryExecMode to pgx. Behind a transaction-mode pooler
// (PgBouncer, Supabase's pooler) prepared statements cannot be relied on: use exec or
// simple_protocol there.
func ParseQueryExecMode(s string) (pgx.QueryExecMode, error) {
	switch s {
	case "", "cache_statement":
		return pgx.QueryExecModeCacheStatement, nil
	case "cache_describe":
		return pgx.QueryExecModeCacheDescribe, nil
	case "describe_exec":
		return pgx.QueryExecModeDescribeExec, nil
	case "exec":
		return pgx.QueryExecModeExec, nil
	case "simple_protocol":
		return pgx.QueryExecModeSimpleProtocol, nil
	default:
		return 0, fmt.Errorf("unknown query exec mode %q", s)
	}
}
