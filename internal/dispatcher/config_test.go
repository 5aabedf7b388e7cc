package dispatcher

import (
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/config"
)

// New repairs nothing: a value outside its key's range is refused, naming the key, and the
// configuration's defaults pass as they are.
func TestNewRefusesABadValueNamingItsKey(t *testing.T) {
	_, err := New(nil, zeroFetcher{}, Config{PackSize: 11}, nil)
	if err == nil {
		t.Fatal("a zero config was accepted")
	}
	for _, key := range []string{"provider.name", "collect.batch_size", "collect.lease", "collect.concurrency",
		"flush size", "catalog.estimate_window", "collect.pack_size"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
	if _, err := New(nil, zeroFetcher{}, FromConfig(config.Default()), nil); err != nil {
		t.Fatalf("the default configuration refused: %v", err)
	}
	c := FromConfig(config.Default())
	c.BatchSize = config.CollectBatchSize.Max + 1
	if _, err := New(nil, zeroFetcher{}, c, nil); err == nil || !strings.Contains(err.Error(), "collect.batch_size") {
		t.Fatalf("a batch size the configuration refuses: %v, want the dispatcher to refuse it too", err)
	}
}
