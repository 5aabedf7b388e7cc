package cli

import (
	"io"
	"strings"

	"golang.org/x/text/width"
)

// table lines up columns by how wide the text shows in a terminal. Item names are Korean, and
// a Hangul syllable takes two columns where text/tabwriter counts one, so a tabwriter table
// with names in it drifts by one column per syllable.
type table struct {
	rows [][]string
}

var cellSpaces = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// add appends a row; a tab or line break in a cell (a tier reason is free text) becomes a space.
func (t *table) add(cells ...string) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = cellSpaces.Replace(c)
	}
	t.rows = append(t.rows, row)
}

// write prints the rows, each cell but the last padded to its column's widest cell and two
// spaces more.
func (t *table) write(w io.Writer) error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-displayWidth(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// displayWidth is how many terminal columns s takes: two for East Asian wide and fullwidth
// characters, one for the rest.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch width.LookupRune(r).Kind() {
		case width.EastAsianWide, width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}
