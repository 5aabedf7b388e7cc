package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A Secret never shows its value: not through any fmt verb, alone or inside a struct, not in
// JSON, and not in a zap log line, whichever field constructor logs it.
func TestASecretPrintsRedactedEverywhere(t *testing.T) {
	const key = "0123456789abcdef-secret"
	s := Secret(key)
	holder := struct {
		Key  Secret
		Keys []Secret
	}{s, []Secret{s}}
	var out []string
	for _, verb := range []string{"%v", "%s", "%q", "%+v", "%#v", "%x"} {
		out = append(out, fmt.Sprintf(verb, s), fmt.Sprintf(verb, holder))
	}
	j, err := json.Marshal(holder)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, string(j))
	var logged bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&logged), zap.DebugLevel))
	log.Info("secrets", zap.Any("any", s), zap.Stringer("stringer", s), zap.Reflect("reflect", holder), zap.Any("holder", holder))
	out = append(out, logged.String())
	for _, o := range out {
		if strings.Contains(o, key) || strings.Contains(o, fmt.Sprintf("%x", key)) {
			t.Errorf("the key shows: %s", o)
		}
	}
	if s.Reveal() != key {
		t.Fatal("Reveal does not give the key back")
	}
}
