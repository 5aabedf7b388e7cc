package outbox

import (
	"os"
	"os/exec"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"testing"
)

func TestZZManualCLI(t *testing.T) {
	pool, url := storetest.NewPool(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(3, 2))
	run := func(args ...string) {
		cmd := exec.Command("/tmp/collector", append([]string{"--database-url", url, "--log-format", "console"}, args...)...)
		cmd.Env = append(os.Environ(), "COLLECTOR_KAFKA_BROKERS="+broker.ListenAddrs()[0], "COLLECTOR_KAFKA_TOPIC="+testTopic)
		out, err := cmd.CombinedOutput()
		t.Logf("$ collector %v -> %v\n%s", args, err, out)
	}
	run("relay-outbox", "--once")
	run("relay-outbox", "--once", "--topic", "missing")
	pool.Exec(t.Context(), "UPDATE outbox SET failed_at = now(), last_error = 'boom\nmultiline' WHERE id = 2")
	enqueue(t, pool, snapshotEvents(1, 1))
	run("outbox", "list")
	run("outbox", "list", "--failed")
	run("outbox", "retry")
	run("outbox", "retry", "--id", "2,5")
	run("outbox", "prune", "--older-than", "0s")
	run("outbox", "prune", "--older-than", "1m")
	broker.Close()
	run("relay-outbox", "--once")
}
