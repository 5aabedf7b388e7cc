// Package migrations embeds the SQL schema migrations so the binary carries its own schema.
//
// Until the first release the schema is one migration, 001_schema.sql, and it changes by
// editing that file: a new table, column or index goes where it belongs there, with a comment
// saying why. After a release, changes are new files, numbered on, each with its down section;
// a migration never drops what an earlier migration of the same release created (change that
// earlier one instead), so each release's files read as the schema it adds.
package migrations

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
)

// FS holds every NNN_name.sql migration, applied in order by store.Migrate.
//
//go:embed *.sql
var FS embed.FS

// Revision names the text of 001_schema.sql, which the migration records on tracked_items (its
// template's {{ .revision }}): while 001 changes in place, a database it made at another text
// has the same version number, and only this tells the two apart (store's schema checks).
func Revision() string {
	b, err := FS.ReadFile("001_schema.sql")
	if err != nil {
		panic("migrations: 001_schema.sql is not embedded: " + err.Error())
	}
	// Line endings are not the text: a checkout that converts them must not read as another.
	sum := sha256.Sum256(bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n")))
	return hex.EncodeToString(sum[:8])
}
