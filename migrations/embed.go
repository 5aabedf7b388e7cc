// Package migrations embeds the SQL schema migrations so the binary carries its own schema.
package migrations

import "embed"

// FS holds every NNN_name.sql migration, applied in order by store.Migrate.
//
//go:embed *.sql
var FS embed.FS
