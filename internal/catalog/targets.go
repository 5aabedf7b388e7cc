package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Word types of GET /df/items: match is an exact name, front a prefix, full a substring.
const (
	WordMatch = "match"
	WordFront = "front"
	WordFull  = "full"
)

// Target is one entry of the targets file: a name to resolve through /df/items.
type Target struct {
	Name string
	// WordType is how the name is searched: match (the default: exactly this name), front
	// (names starting with it) or full (names containing it).
	WordType string
	// All imports every item the search finds. Without it a target wants exactly one item,
	// and several matches are reported as ambiguous.
	All bool
	// Tier is the starting tier of a newly imported item; "" means catalog.default_tier. It
	// never changes the tier of an item that is already tracked.
	Tier tiers.Tier
	// ItemID pins one item when several share the name.
	ItemID string
	Note   string

	File string
	Line int
}

// Where is "file:line", for reports and errors.
func (t Target) Where() string { return fmt.Sprintf("%s:%d", t.File, t.Line) }

// MaxTargetsBytes bounds a targets file: parsed, YAML takes many times a file's size, and a
// list of item names is a few hundred kilobytes at a hundred thousand items.
const MaxTargetsBytes = 64 << 20

// LoadTargets reads and checks a targets file.
func LoadTargets(path string) ([]Target, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import targets: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxTargetsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("import targets: %w", err)
	}
	if len(data) > MaxTargetsBytes {
		return nil, fmt.Errorf("import targets %s: larger than %d MB; is it the targets file?", path, MaxTargetsBytes>>20)
	}
	return ParseTargets(path, data)
}

// ParseTargets parses a targets file. The file is either a list or a mapping with an
// `items:` list; each entry is a bare name or a mapping with name, wordType, tier, itemId, all
// and note. Every problem is reported with its file and line, all at once.
func ParseTargets(file string, data []byte) ([]Target, error) {
	// UTF-16 with a byte-order mark the YAML library reads itself; anything else must be
	// UTF-8, which it only calls an "invalid leading UTF-8 octet", with no line.
	if !utf8.Valid(data) && !bytes.HasPrefix(data, []byte{0xFE, 0xFF}) && !bytes.HasPrefix(data, []byte{0xFF, 0xFE}) {
		line := 1 + bytes.Count(data[:invalidUTF8At(data)], []byte("\n"))
		return nil, fmt.Errorf("%s:%d: not UTF-8 text (saved as CP949/EUC-KR or another legacy encoding?): save the file as UTF-8", file, line)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("import targets %s: %w", file, err)
	}
	// A second document (after ---) would otherwise be ignored, its items silently not
	// tracked; an empty one (a trailing ---) is nothing.
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || !emptyDocument(&more) {
			line := more.Line
			if len(more.Content) > 0 {
				line = more.Content[0].Line
			}
			if err != nil {
				return nil, fmt.Errorf("import targets %s: a second YAML document (after ---): %w", file, err)
			}
			return nil, fmt.Errorf("%s:%d: a second YAML document (after ---): a targets file is one document, with every item under one items list", file, line)
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("import targets %s: the file lists no items (add one line per item under items:)", file)
	}
	root := doc.Content[0]
	list := root
	if root.Kind == yaml.MappingNode {
		if err := repeatedKey(file, root); err != nil {
			return nil, err
		}
		list = nil
		for i := 0; i+1 < len(root.Content); i += 2 {
			k := root.Content[i]
			if k.Value != "items" {
				return nil, fmt.Errorf("%s:%d: unknown key %q at the top level (allowed: items)", file, k.Line, k.Value)
			}
			list = root.Content[i+1]
		}
		if list == nil {
			return nil, fmt.Errorf("%s:%d: no items: list", file, root.Line)
		}
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return nil, fmt.Errorf("%s:%d: the items list is empty", file, list.Line)
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: expected a list of items", file, list.Line)
	}

	var (
		out  []Target
		errs []error
		seen = map[string]int{}
	)
	for _, n := range list.Content {
		t, err := parseTarget(file, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := t.WordType + "\x00" + t.Name + "\x00" + t.ItemID
		if prev, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("%s:%d: %q is listed again (first at line %d)", file, t.Line, t.Name, prev))
			continue
		}
		seen[key] = t.Line
		out = append(out, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("import targets %s: the file lists no items", file)
	}
	return out, nil
}

func parseTarget(file string, n *yaml.Node) (Target, error) {
	t := Target{File: file, Line: n.Line, WordType: WordMatch}
	bad := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", file, n.Line, fmt.Sprintf(format, args...))
	}
	switch n.Kind {
	case yaml.ScalarNode:
		t.Name = strings.TrimSpace(n.Value)
	case yaml.MappingNode:
		if err := repeatedKey(file, n); err != nil {
			return t, err
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind != yaml.ScalarNode {
				return t, bad(v, "%s must be a plain value", k.Value)
			}
			val := strings.TrimSpace(v.Value)
			switch k.Value {
			case "name":
				t.Name = val
			case "wordType":
				switch val {
				case WordMatch, WordFront, WordFull:
					t.WordType = val
				default:
					return t, bad(v, "wordType %q: allowed match (exact name, the default), front (prefix), full (contains)", val)
				}
			case "tier":
				tier, err := tiers.Parse(val)
				if err != nil {
					return t, bad(v, "%v", err)
				}
				t.Tier = tier
			case "itemId":
				if !isItemID(val) {
					return t, bad(v, "itemId %q must be 32 lowercase hex characters", val)
				}
				t.ItemID = val
			case "note":
				t.Note = val
			case "all":
				switch val {
				case "true":
					t.All = true
				case "false":
				default:
					return t, bad(v, "all %q: allowed true, false", val)
				}
			default:
				return t, bad(k, "unknown field %q (allowed: name, wordType, tier, itemId, all, note)", k.Value)
			}
		}
	default:
		return t, bad(n, "an item is a name or a mapping with name, wordType, tier, itemId, all, note")
	}
	if t.Name == "" {
		return t, bad(n, "item has no name")
	}
	if r := utf8.RuneCountInString(t.Name); r > provider.MaxNameRunes {
		return t, bad(n, "item name of %d characters: names are at most %d", r, provider.MaxNameRunes)
	}
	return t, nil
}

// repeatedKey refuses a key given twice in one mapping. yaml.v3 keeps both in a Node, and the
// later would silently win: a second items: list appended to the file would drop the first.
func repeatedKey(file string, m *yaml.Node) error {
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if line, dup := first[k.Value]; dup {
			return fmt.Errorf("%s:%d: %s is given again (first at line %d); give each key once", file, k.Line, k.Value, line)
		}
		first[k.Value] = k.Line
	}
	return nil
}

// isItemID reports whether s looks like a Neople id: 32 lowercase hex characters.
func isItemID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// emptyDocument: a document with nothing in it (the null a bare --- reads as).
func emptyDocument(n *yaml.Node) bool {
	if len(n.Content) == 0 {
		return true
	}
	c := n.Content[0]
	return len(n.Content) == 1 && c.Kind == yaml.ScalarNode && c.Tag == "!!null" && c.Value == ""
}

// invalidUTF8At is the offset of data's first byte that is not part of valid UTF-8.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}
