package dispatcher

import (
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// New repairs nothing: a value outside its key's range is refused, naming the key, and the
// configuration's defaults pass as they are. The partition keeper is the caller's: New builds
// none of its own.
func TestNewRefusesABadValueNamingItsKey(t *testing.T) {
	_, err := New(nil, zeroFetcher{}, Config{PackSize: 11}, nil)
	if err == nil {
		t.Fatal("a zero config was accepted")
	}
	for _, key := range []string{"provider.name", "collect.batch_size", "collect.lease", "collect.concurrency",
		"flush size", "catalog.estimate_window", "collect.pack_size", "partition keeper"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
	c := FromConfig(config.Default())
	c.Partitions = storetest.Keeper(nil) // the caller's one keeper
	if _, err := New(nil, zeroFetcher{}, c, nil); err != nil {
		t.Fatalf("the default configuration refused: %v", err)
	}
	c.BatchSize = config.CollectBatchSize.Max + 1
	if _, err := New(nil, zeroFetcher{}, c, nil); err == nil || !strings.Contains(err.Error(), "collect.batch_size") {
		t.Fatalf("a batch size the configuration refuses: %v, want the dispatcher to refuse it too", err)
	}
}
