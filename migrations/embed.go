// Package migrations embeds the service's SQL migrations. The files are also sqlc's schema
// source, so the generated queries and the migrated database never disagree.
package migrations

import "embed"

// FS holds the migration files, applied in lexical order of their names.
//
//go:embed *.sql
var FS embed.FS
