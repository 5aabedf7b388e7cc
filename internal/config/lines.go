package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// keyLines maps each key written in a YAML config file (lower-cased, dotted, as viper reads
// them) to the line it is written on, so an error can send the operator to it. Best effort:
// a file viper has already read parses here too, and a key not found is named without a line.
func keyLines(file string) map[string]int {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	lines := map[string]int{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merged anchor: its keys belong here
				walk(val, prefix)
				continue
			}
			path := prefix + strings.ToLower(k.Value)
			if _, seen := lines[path]; !seen {
				lines[path] = k.Line
			}
			walk(val, path+".")
		}
	}
	walk(doc.Content[0], "")
	return lines
}

// at is where a key of the file is written: "file F:LINE", or "file F" when its line is unknown.
func at(file string, lines map[string]int, key string) string {
	if l, ok := lines[key]; ok {
		return fmt.Sprintf("file %s:%d", file, l)
	}
	return "file " + file
}

// unknownKeys refuses the file's keys that no setting reads, each with its line and the
// setting it was probably meant to be: a typo would otherwise leave a default in force.
func unknownKeys(file string, lines map[string]int) error {
	known := Keys()
	var errs []error
	for _, path := range slices.Sorted(maps.Keys(lines)) {
		if knownPath(known, path) {
			continue
		}
		msg := fmt.Sprintf("config %s (%s): no such setting", path, at(file, lines, path))
		if s := closest(known, path); s != "" {
			msg += "; did you mean " + s + "?"
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// knownPath tells whether path is a setting, a section holding settings, or inside a setting:
// a map-valued one's keys are the user's to name (kafka.topic_config), and any other's are a
// value of the wrong shape, which decoding refuses without quoting what may be a password.
func knownPath(known map[string]any, path string) bool {
	if _, ok := known[path]; ok {
		return true
	}
	for k := range known {
		if strings.HasPrefix(k, path+".") || strings.HasPrefix(path, k+".") {
			return true
		}
	}
	return false
}

// closest is the setting of path's section within two edits of it, if one is.
func closest(known map[string]any, path string) string {
	section, name := "", path
	if i := strings.LastIndex(path, "."); i >= 0 {
		section, name = path[:i+1], path[i+1:]
	}
	best, bestD := "", 3
	for k := range known {
		rest, ok := strings.CutPrefix(k, section)
		if !ok {
			continue
		}
		rest, _, _ = strings.Cut(rest, ".") // a sub-section's name counts too
		if d := editDistance(name, rest); d < bestD || d == bestD && section+rest < best {
			best, bestD = section+rest, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
