package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/tiers"
)

func TestParseTargets(t *testing.T) {
	src := `# demo
items:
  - 무색 큐브 조각
  - {name: 코스모 소울, tier: hot_1m, note: "raid material"}
  - name: 골드 큐브
    wordType: front
    all: true
  - {name: 흑요석 단검, itemId: 0123456789abcdef0123456789abcdef}
`
	got, err := ParseTargets("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{
		{Name: "무색 큐브 조각", WordType: WordMatch, File: "t.yaml", Line: 3},
		{Name: "코스모 소울", WordType: WordMatch, Tier: tiers.Hot, Note: "raid material", File: "t.yaml", Line: 4},
		{Name: "골드 큐브", WordType: WordFront, All: true, File: "t.yaml", Line: 5},
		{Name: "흑요석 단검", WordType: WordMatch, ItemID: "0123456789abcdef0123456789abcdef", File: "t.yaml", Line: 8},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d targets, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("target %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	// A bare list works too.
	got, err = ParseTargets("t.yaml", []byte("- a\n- b\n"))
	if err != nil || len(got) != 2 || got[1].Line != 2 {
		t.Fatalf("bare list: %+v, %v", got, err)
	}
}

func TestParseTargetsErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"syntax", "items:\n  - {name: a\n", []string{"t.yaml", "line"}},
		{"unknown field", "items:\n  - a\n  - {name: b, tierr: HOT_1M}\n", []string{"t.yaml:3:", `unknown field "tierr"`}},
		{"bad tier", "items:\n  - {name: b, tier: LUKEWARM}\n", []string{"t.yaml:2:", "LUKEWARM"}},
		{"bad wordType", "items:\n\n  - {name: b, wordType: fuzzy}\n", []string{"t.yaml:3:", "fuzzy"}},
		{"no name", "items:\n  - {tier: HOT_1M}\n", []string{"t.yaml:2:", "no name"}},
		{"bad id", "items:\n  - {name: b, itemId: seed-1}\n", []string{"t.yaml:2:", "32 lowercase hex"}},
		{"duplicate", "items:\n  - a\n  - b\n  - a\n", []string{"t.yaml:4:", "first at line 2"}},
		{"top level", "things:\n  - a\n", []string{"t.yaml:1:", `unknown key "things"`}},
		{"empty", "", []string{"t.yaml", "no items"}},
		{"empty list", "items:\n", []string{"t.yaml:1:", "empty"}},
		{"second document after an empty one", "items:\n  - a\n---\n---\nitems:\n  - b\n", []string{"t.yaml:5:", "second YAML document"}},
		{"second document", "items:\n  - a\n---\nitems:\n  - b\n", []string{"t.yaml:4:", "second YAML document"}},
		{"items given twice", "items:\n  - a\n  - b\nitems:\n  - c\n", []string{"t.yaml:4:", "items is given again (first at line 1)"}},
		{"a field given twice", "items:\n  - {name: a, name: b}\n", []string{"t.yaml:2:", "name is given again"}},
		{"a tier given twice", "items:\n  - name: a\n    tier: HOT_1M\n    tier: COLD_10M\n", []string{"t.yaml:4:", "tier is given again (first at line 3)"}},
		{"several at once", "items:\n  - {name: a, tier: X}\n  - {name: b, tier: Y}\n", []string{"t.yaml:2:", "t.yaml:3:"}},
		{"a name too long", "items:\n  - a\n  - " + strings.Repeat("검", 201) + "\n", []string{"t.yaml:3:", "201 characters"}},
		// 황금 큐브 in CP949, as a Korean Windows editor may save it.
		{"not UTF-8", "items:\n  - a\n  - \xc8\xb2\xb1\xdd \xc5\xa5\xba\xea\n", []string{"t.yaml:3:", "not UTF-8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTargets("t.yaml", []byte(tc.src))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if got, err := ParseTargets("t.yaml", []byte("items:\n  - a\n---\n")); err != nil || len(got) != 1 {
		t.Errorf("a trailing ---: %v %v, want the one item", got, err)
	}
	// UTF-16 with its byte-order mark is text the YAML library reads.
	utf16 := []byte{0xFF, 0xFE}
	for _, r := range "items:\n  - 검\n" {
		utf16 = append(utf16, byte(r), byte(r>>8))
	}
	if got, err := ParseTargets("t.yaml", utf16); err != nil || len(got) != 1 || got[0].Name != "검" {
		t.Errorf("UTF-16 with a byte-order mark: %+v %v, want the one item", got, err)
	}
}

// A file far larger than any list of names is refused before it is parsed (YAML takes many
// times a file's size in memory), naming the file.
func TestATargetsFileTooLargeIsRefusedUnread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("items:\n  - a\n#"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxTargetsBytes + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := LoadTargets(path); err == nil || !strings.Contains(err.Error(), "huge.yaml") || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("LoadTargets of a %d-byte file: %v; want it refused, naming the file", MaxTargetsBytes+1, err)
	}
}
