package nsqhttp

import (
	"encoding/json"
	"net/http"

	"github.com/spillq/spillq"
)

// HealthHandler serves check's answer as JSON ({"status": "degraded",
// "reasons": [...]}) for an orchestrator's probes. As a liveness probe
// (ready false) it answers 503 only when the status is failed: a sticky
// write error or a closed queue, which a restart cures. As a readiness
// probe (ready true) it answers 503 when the status is anything but ok,
// taking the process out of rotation while its disk is full or near its
// budget, its reads fail, or a channel lags beyond the thresholds the
// check was given. Otherwise 200.
//
// Lag and depth thresholds in a readiness check take every replica out
// of rotation at once when all of them lag; set them there only if that
// is what should happen, and alert on them otherwise.
func HealthHandler(check func() spillq.Health, ready bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := check()
		if h.Reasons == nil {
			h.Reasons = []string{}
		}
		status := http.StatusOK
		if h.Status == spillq.HealthFailed || (ready && h.Status != spillq.HealthOK) {
			status = http.StatusServiceUnavailable
		}
		b, _ := json.Marshal(h)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		w.Write(append(b, '\n'))
	})
}

// Check returns a health check over opts' queues and topics with the
// given thresholds, for Options.Health or HealthHandler: their
// spillq.CombineHealth.
func Check(queues map[string]*spillq.Queue, topics map[string]*spillq.Topic, opts spillq.HealthOptions) func() spillq.Health {
	return func() spillq.Health {
		named := map[string]spillq.Health{}
		for name, q := range queues {
			named[name] = q.Health(opts)
		}
		for name, t := range topics {
			named[name] = t.Health(opts)
		}
		return spillq.CombineHealth(named)
	}
}
