package crashtest

import (
	"os"
	"strconv"
	"testing"
)

// TestHarnessChild reports numbered events until killed, or kills itself
// after SPILLQ_SELF_KILL of them.
func TestHarnessChild(t *testing.T) {
	if _, ok := Dir(); !ok {
		t.Skip("run by the harness tests")
	}
	self, _ := strconv.Atoi(os.Getenv("SPILLQ_SELF_KILL"))
	for i := 0; ; i++ {
		if self > 0 && i == self {
			KillSelf()
		}
		Report("event", i, "extra")
	}
}

func TestKillAfter(t *testing.T) {
	res := Start(t, Run{Test: "TestHarnessChild", Dir: t.TempDir(), KillAfter: 50, KillKind: "event"})
	got := res.Events["event"]
	if res.KilledSelf || len(got) < 50 {
		t.Fatalf("killed self %v, %d events", res.KilledSelf, len(got))
	}
	// Every line arrives whole and in order, first field first.
	for i, id := range got {
		if id != strconv.Itoa(i) {
			t.Fatalf("event %d has id %q", i, id)
		}
	}
	if !res.Has("event", "49") || !res.Set("event")["0"] {
		t.Fatal("Has/Set disagree with Events")
	}
}

func TestSelfKill(t *testing.T) {
	var seen int
	res := Start(t, Run{
		Test: "TestHarnessChild", Dir: t.TempDir(), Env: []string{"SPILLQ_SELF_KILL=7"},
		OnEvent: func(kind, id string, n int) { seen = n },
	})
	if !res.KilledSelf || len(res.Events["event"]) != 7 || seen != 7 {
		t.Fatalf("self-kill run: killed self %v, %d events, OnEvent saw %d", res.KilledSelf, len(res.Events["event"]), seen)
	}
}
