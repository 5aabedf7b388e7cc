package cli

import (
	"strings"
	"testing"
)

// A Hangul syllable shows two columns wide: the columns after a Korean name start where they
// start after an ASCII one.
func TestTableAlignsKoreanNames(t *testing.T) {
	var tb table
	tb.add("ITEM_ID", "NAME", "TIER")
	tb.add("a1", "골드 큐브 조각", "HOT_1M")
	tb.add("b2", "Orb", "WARM_5M")
	var out strings.Builder
	if err := tb.write(&out); err != nil {
		t.Fatal(err)
	}
	// 골드 큐브 조각 is 6 syllables and 2 spaces: 14 columns, so NAME is 14 wide.
	want := "ITEM_ID  NAME            TIER\n" +
		"a1       골드 큐브 조각  HOT_1M\n" +
		"b2       Orb             WARM_5M\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
