package metrics_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoBridgeDependency: importing metrics must not compile nsqbridge and
// go-nsq into a service that only wants its queues' metrics; the bridge's
// collectors live in nsqbridge/bridgemetrics.
func TestNoBridgeDependency(t *testing.T) {
	// go test puts its own GOROOT/bin first on the test's PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/spillq/spillq/metrics").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/spillq/spillq/nsqbridge" || strings.HasPrefix(pkg, "github.com/spillq/spillq/nsqbridge/") ||
			pkg == "github.com/nsqio/go-nsq" || strings.HasPrefix(pkg, "github.com/nsqio/go-nsq/") {
			t.Errorf("metrics depends on %s", pkg)
		}
	}
}
