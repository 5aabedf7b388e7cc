// Package migrations embeds the SQL schema migrations so the binary carries its own schema.
//
// Until the first release the schema is one migration, 001_schema.sql, and it changes by
// editing that file: a new table, column or index goes where it belongs there, with a comment
// saying why. After a release, changes are new files, numbered on, each with its down section;
// a migration never drops what an earlier migration of the same release created (change that
// earlier one instead), so each release's files read as the schema it adds.
package migrations

import "embed"

// FS holds every NNN_name.sql migration, applied in order by store.Migrate.
//
//go:embed *.sql
var FS embed.FS
