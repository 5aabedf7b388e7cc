package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/tiers"
)

type jsonSchema struct {
	Schema     string                `json:"$schema"`
	Required   []string              `json:"required"`
	Properties map[string]schemaProp `json:"properties"`
}

type schemaProp struct {
	Type        any    `json:"type"` // "integer" or ["integer", "null"]
	Const       any    `json:"const"`
	Enum        []any  `json:"enum"`
	Format      string `json:"format"`
	Description string `json:"description"`
}

func (p schemaProp) types() []string {
	switch t := p.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			out = append(out, v.(string))
		}
		return out
	}
	return nil
}

func loadSchema(t *testing.T) jsonSchema {
	t.Helper()
	b, err := os.ReadFile("../../docs/snapshot-event.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s jsonSchema
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("docs/snapshot-event.schema.json: %v", err)
	}
	return s
}

// The JSON Schema in docs/ names exactly SnapshotEvent's JSON fields, all required, with types
// that match the Go types (pointers nullable), so the documentation cannot drift from the code.
func TestSchemaMatchesSnapshotEvent(t *testing.T) {
	s := loadSchema(t)
	if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
		t.Fatalf("$schema %q, want 2020-12", s.Schema)
	}
	typ := reflect.TypeFor[SnapshotEvent]()
	var fields []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields = append(fields, name)
		p, ok := s.Properties[name]
		if !ok {
			t.Errorf("schema lacks property %q (field %s)", name, f.Name)
			continue
		}
		if p.Description == "" {
			t.Errorf("property %q has no description", name)
		}
		want := jsonTypes(f.Type)
		got := p.types()
		if p.Const != nil || p.Enum != nil {
			continue // schema_version and tier narrow their Go type further
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("property %q has type %v, the Go field %s %s means %v", name, got, f.Name, f.Type, want)
		}
	}
	if len(s.Properties) != len(fields) {
		t.Errorf("schema has %d properties, SnapshotEvent %d fields", len(s.Properties), len(fields))
	}
	req := slices.Clone(s.Required)
	slices.Sort(req)
	slices.Sort(fields)
	if !slices.Equal(req, fields) {
		t.Errorf("required %v, want every field %v (all are always present)", req, fields)
	}
	if p := s.Properties["collected_at"]; p.Format != "date-time" {
		t.Errorf("collected_at format %q", p.Format)
	}
	if p := s.Properties["schema_version"]; p.Const != float64(SchemaVersion) {
		t.Errorf("schema_version const %v, want %d", p.Const, SchemaVersion)
	}
	var tierNames []any
	for _, tier := range tiers.All() {
		tierNames = append(tierNames, string(tier))
	}
	if p := s.Properties["tier"]; !slices.Equal(p.Enum, tierNames) {
		t.Errorf("tier enum %v, want internal/tiers' %v", p.Enum, tierNames)
	}
}

func jsonTypes(t reflect.Type) []string {
	var out []string
	if t.Kind() == reflect.Pointer {
		out = append(out, "null")
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]() || t.Kind() == reflect.String:
		out = append(out, "string")
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		out = append(out, "integer")
	case t.Kind() == reflect.Float64:
		out = append(out, "number")
	case t.Kind() == reflect.Bool:
		out = append(out, "boolean")
	default:
		out = append(out, "unknown "+t.String())
	}
	return out
}

// The example in docs/events.md is a complete, valid event, and the document names every
// header the relay sends and every field of the value.
func TestEventsDocMatchesRelay(t *testing.T) {
	b, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/events.md has no ```json example")
	}
	var ev SnapshotEvent
	dec := json.NewDecoder(strings.NewReader(m[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("example value: %v", err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(m[1]), &fields); err != nil {
		t.Fatal(err)
	}
	s := loadSchema(t)
	for _, name := range s.Required {
		if _, ok := fields[name]; !ok {
			t.Errorf("example lacks %q", name)
		}
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/events.md does not describe field %q", name)
		}
	}
	if ev.SchemaVersion != SchemaVersion {
		t.Errorf("example schema_version %d", ev.SchemaVersion)
	}
	for _, want := range []string{fmt.Sprintf("| `schema_version`      | integer, `%d`", SchemaVersion), fmt.Sprintf("## Version %d\n", SchemaVersion)} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/events.md lacks %q: the current version's row and what changed in it", want)
		}
	}
	for _, h := range message(pendingRow{ItemID: "x"}, "s").Headers {
		if !strings.Contains(doc, "`"+h.Key+"`") {
			t.Errorf("docs/events.md does not describe header %q", h.Key)
		}
	}
	topic := config.Default().Kafka.Topic
	for _, want := range []string{topic, EventTypeSnapshot, "kcat -C -b localhost:9092 -t " + topic} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/events.md does not mention %q", want)
		}
	}
}
