package nsqhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/nsqhttp"
)

// fixture is a queue and a topic with channels, served by a handler.
type fixture struct {
	jobs   *spillq.Queue
	events *spillq.Topic
	srv    *httptest.Server
}

// newFixture opens a queue "jobs" with 5 messages waiting, and a topic
// "events" with 3 messages and channels billing (open) and audit (closed).
func newFixture(t *testing.T, ro bool) *fixture {
	t.Helper()
	ctx := context.Background()
	jobs, err := spillq.Open(t.TempDir(), spillq.Options{MemQueueSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { jobs.Close() })
	for i := 0; i < 5; i++ {
		if err := jobs.Put(ctx, []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	events, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.Close() })
	if _, err := events.Channel("billing", spillq.ChannelOptions{}); err != nil {
		t.Fatal(err)
	}
	audit, err := events.Channel("audit", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := events.Put(ctx, []byte("event")); err != nil {
			t.Fatal(err)
		}
	}
	if err := audit.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := spillq.NewWorker(jobs, func(context.Context, *spillq.Message) error { return nil }, spillq.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := nsqhttp.New(nsqhttp.Options{
		Queues:   map[string]*spillq.Queue{"jobs": jobs},
		Topics:   map[string]*spillq.Topic{"events": events},
		Workers:  []nsqhttp.Worker{{Topic: "jobs", Name: "worker-1", Worker: w}},
		ReadOnly: ro,
		Hostname: "testhost",
		Health:   nsqhttp.Check(map[string]*spillq.Queue{"jobs": jobs}, nil, spillq.HealthOptions{MaxDepth: 100}),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{jobs: jobs, events: events, srv: srv}
}

func (f *fixture) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (f *fixture) post(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The schema as nsqadmin v1.3.0 decodes it (internal/clusterinfo), with
// the counts as int64: a number written 14.0 fails to decode, as it does
// there.
type nsqadminStats struct {
	Topics []struct {
		TopicName    string `json:"topic_name"`
		Depth        int64  `json:"depth"`
		BackendDepth int64  `json:"backend_depth"`
		MessageCount int64  `json:"message_count"`
		Paused       bool   `json:"paused"`
		Channels     []struct {
			ChannelName   string `json:"channel_name"`
			Depth         int64  `json:"depth"`
			BackendDepth  int64  `json:"backend_depth"`
			InFlightCount int64  `json:"in_flight_count"`
			DeferredCount int64  `json:"deferred_count"`
			RequeueCount  int64  `json:"requeue_count"`
			TimeoutCount  int64  `json:"timeout_count"`
			MessageCount  int64  `json:"message_count"`
			ClientCount   int    `json:"client_count"`
			Paused        bool   `json:"paused"`
			Clients       []struct {
				ClientID      string `json:"client_id"`
				InFlightCount int    `json:"in_flight_count"`
				FinishCount   int64  `json:"finish_count"`
				ConnectTs     int64  `json:"connect_ts"`
			} `json:"clients"`
			E2eProcessingLatency *struct {
				Count       int                  `json:"count"`
				Percentiles []map[string]float64 `json:"percentiles"`
			} `json:"e2e_processing_latency"`
		} `json:"channels"`
		E2eProcessingLatency *struct {
			Count       int                  `json:"count"`
			Percentiles []map[string]float64 `json:"percentiles"`
		} `json:"e2e_processing_latency"`
	} `json:"topics"`
}

func (f *fixture) stats(t *testing.T, query string) nsqadminStats {
	t.Helper()
	code, b := f.get(t, "/stats?format=json"+query)
	if code != http.StatusOK {
		t.Fatalf("/stats: %d %s", code, b)
	}
	var s nsqadminStats
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("/stats does not decode as nsqadmin decodes it: %v\n%s", err, b)
	}
	// null latency objects crash nsqadmin (channel) or fail its topic page.
	for _, tp := range s.Topics {
		if tp.E2eProcessingLatency == nil {
			t.Fatalf("topic %s: e2e_processing_latency is null\n%s", tp.TopicName, b)
		}
		for _, c := range tp.Channels {
			if c.E2eProcessingLatency == nil {
				t.Fatalf("channel %s/%s: e2e_processing_latency is null\n%s", tp.TopicName, c.ChannelName, b)
			}
		}
	}
	return s
}

func TestStatsSchema(t *testing.T) {
	f := newFixture(t, false)
	s := f.stats(t, "")
	if len(s.Topics) != 2 || s.Topics[0].TopicName != "events" || s.Topics[1].TopicName != "jobs" {
		t.Fatalf("topics: %+v", s.Topics)
	}
	jobs := s.Topics[1]
	if jobs.Depth != 0 || jobs.MessageCount != 5 || len(jobs.Channels) != 1 {
		t.Fatalf("jobs topic: %+v", jobs)
	}
	c := jobs.Channels[0]
	if c.ChannelName != "jobs" || c.Depth != 5 || c.BackendDepth > c.Depth || c.MessageCount != 5 || c.ClientCount != 1 || len(c.Clients) != 1 || c.Clients[0].ClientID != "worker-1" {
		t.Fatalf("jobs channel: %+v", c)
	}
	if st := f.jobs.Stats(); c.BackendDepth != st.DiskDepth {
		t.Fatalf("jobs backend_depth %d, want the disk depth %d", c.BackendDepth, st.DiskDepth)
	}
	events := s.Topics[0]
	if events.MessageCount != 3 || len(events.Channels) != 2 {
		t.Fatalf("events topic: %+v", events)
	}
	for _, c := range events.Channels {
		if c.Depth != 3 || c.MessageCount != 3 || c.ClientCount != 0 {
			t.Fatalf("events channel %s: %+v", c.ChannelName, c)
		}
	}
}

// TestStatsLatencyPercentiles: a channel that has finished messages
// reports their count and spillq's percentiles, as integers.
func TestStatsLatencyPercentiles(t *testing.T) {
	f := newFixture(t, false)
	m, err := f.jobs.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	lat := f.stats(t, "&topic=jobs").Topics[0].Channels[0].E2eProcessingLatency
	if lat.Count != 1 || len(lat.Percentiles) != 3 || lat.Percentiles[0]["quantile"] != 0.5 || lat.Percentiles[0]["value"] <= 0 {
		t.Fatalf("latency: %+v", lat)
	}
	// A topic's percentiles are its slowest channel's: nsqadmin heads its
	// channels' latency columns with them.
	billing, err := f.events.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err = billing.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	tp := f.stats(t, "&topic=events").Topics[0]
	var want float64
	for _, c := range tp.Channels {
		if c.ChannelName == "billing" && len(c.E2eProcessingLatency.Percentiles) == 3 {
			want = c.E2eProcessingLatency.Percentiles[1]["value"]
		}
	}
	if got := tp.E2eProcessingLatency; got.Count != 1 || len(got.Percentiles) != 3 || got.Percentiles[1]["value"] != want || want <= 0 {
		t.Fatalf("topic latency %+v, want billing's p99 %v", got, want)
	}
}

func TestStatsFilters(t *testing.T) {
	f := newFixture(t, false)
	s := f.stats(t, "&topic=events&channel=audit&include_clients=false")
	if len(s.Topics) != 1 || s.Topics[0].TopicName != "events" || len(s.Topics[0].Channels) != 1 || s.Topics[0].Channels[0].ChannelName != "audit" {
		t.Fatalf("topic=events&channel=audit: %+v", s.Topics)
	}
	s = f.stats(t, "&topic=jobs&include_clients=false")
	if c := s.Topics[0].Channels[0]; c.ClientCount != 1 || len(c.Clients) != 0 {
		t.Fatalf("include_clients=false: %+v", c)
	}
	if s = f.stats(t, "&topic=nosuch"); len(s.Topics) != 0 {
		t.Fatalf("topic=nosuch: %+v", s.Topics)
	}
}

func TestInfo(t *testing.T) {
	f := newFixture(t, false)
	code, b := f.get(t, "/info")
	var info struct {
		Version          string `json:"version"`
		BroadcastAddress string `json:"broadcast_address"`
		Hostname         string `json:"hostname"`
		HTTPPort         int    `json:"http_port"`
		TCPPort          int    `json:"tcp_port"`
	}
	if err := json.Unmarshal(b, &info); code != http.StatusOK || err != nil {
		t.Fatalf("/info: %d %v %s", code, err, b)
	}
	// nsqadmin sends its reads and actions to broadcast_address:http_port:
	// by default the address it reached the handler at.
	want := strings.TrimPrefix(f.srv.URL, "http://")
	if got := info.BroadcastAddress + ":" + itoa(info.HTTPPort); got != want || info.Version != nsqhttp.DefaultVersion || info.Hostname != "testhost" {
		t.Fatalf("/info: %+v, want broadcast %s", info, want)
	}
	if code, b := f.get(t, "/ping"); code != http.StatusOK || string(b) != "OK" {
		t.Fatalf("/ping: %d %s", code, b)
	}
}

func TestInfoOverride(t *testing.T) {
	h, err := nsqhttp.New(nsqhttp.Options{BroadcastAddress: "svc.internal", HTTPPort: 4151, Version: "0.4.2"})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9999/info", nil))
	if b := rec.Body.String(); !strings.Contains(b, `"broadcast_address":"svc.internal"`) || !strings.Contains(b, `"http_port":4151`) || !strings.Contains(b, `"version":"0.4.2"`) {
		t.Fatalf("/info: %s", b)
	}
}

func TestNewRefuses(t *testing.T) {
	q, err := spillq.Open(t.TempDir(), spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	w, err := spillq.NewWorker(q, func(context.Context, *spillq.Message) error { return nil }, spillq.WorkerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]nsqhttp.Options{
		"v prefix":        {Version: "v1.3.0"},
		"two fields":      {Version: "1.3"},
		"worker no queue": {Workers: []nsqhttp.Worker{{Topic: "x", Name: "w", Worker: w}}},
		"nil queue":       {Queues: map[string]*spillq.Queue{"x": nil}},
	} {
		if _, err := nsqhttp.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
}

func TestChannelActions(t *testing.T) {
	f := newFixture(t, false)
	if code, b := f.post(t, "/channel/pause?topic=jobs&channel=jobs"); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, b)
	}
	if !f.jobs.Stats().Paused || !f.stats(t, "").Topics[1].Channels[0].Paused {
		t.Fatal("channel/pause did not pause the queue")
	}
	if _, err := f.jobs.TryReceive(); err == nil {
		t.Fatal("a paused queue delivered")
	}
	if code, b := f.post(t, "/channel/unpause?topic=jobs&channel=jobs"); code != http.StatusOK || f.jobs.Stats().Paused {
		t.Fatalf("unpause: %d %s, paused %v", code, b, f.jobs.Stats().Paused)
	}
	if code, b := f.post(t, "/channel/empty?topic=jobs&channel=jobs"); code != http.StatusOK || f.jobs.Depth() != 0 {
		t.Fatalf("empty: %d %s, depth %d", code, b, f.jobs.Depth())
	}
	// A topic's open channel; its closed one cannot be paused or emptied,
	// only deleted.
	if code, b := f.post(t, "/channel/empty?topic=events&channel=billing"); code != http.StatusOK {
		t.Fatalf("empty billing: %d %s", code, b)
	}
	if d := channelDepth(f.events, "billing"); d != 0 {
		t.Fatalf("billing depth %d after empty", d)
	}
	if code, _ := f.post(t, "/channel/pause?topic=events&channel=audit"); code != http.StatusConflict {
		t.Fatalf("pause of a channel not open: %d, want 409", code)
	}
	if code, b := f.post(t, "/channel/delete?topic=events&channel=audit"); code != http.StatusOK {
		t.Fatalf("delete audit: %d %s", code, b)
	}
	if chs := f.events.Channels(); len(chs) != 1 || chs[0] != "billing" {
		t.Fatalf("channels after delete: %v", chs)
	}
	for path, want := range map[string]int{
		"/channel/delete?topic=jobs&channel=jobs":  http.StatusNotImplemented,
		"/channel/pause?topic=nosuch&channel=x":    http.StatusNotFound,
		"/channel/pause?topic=jobs&channel=other":  http.StatusNotFound,
		"/channel/pause?topic=jobs":                http.StatusBadRequest,
		"/channel/pause?topic=events&channel=gone": http.StatusNotFound,
		"/topic/empty?topic=jobs":                  http.StatusNotImplemented,
		"/topic/delete?topic=jobs":                 http.StatusNotImplemented,
		"/pub?topic=jobs":                          http.StatusNotImplemented,
	} {
		if code, b := f.post(t, path); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, b, want)
		}
	}
	if code, _ := f.get(t, "/channel/pause?topic=jobs&channel=jobs"); code != http.StatusMethodNotAllowed || f.jobs.Stats().Paused {
		t.Fatalf("GET of an action: %d, want 405 and nothing done", code)
	}
}

func TestTopicPause(t *testing.T) {
	f := newFixture(t, false)
	billing, err := f.events.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, b := f.post(t, "/topic/pause?topic=events"); code != http.StatusOK {
		t.Fatalf("topic/pause: %d %s", code, b)
	}
	if !billing.Stats().Paused || !f.stats(t, "&topic=events").Topics[0].Paused {
		t.Fatal("topic/pause did not pause the topic's open channel")
	}
	if code, b := f.post(t, "/topic/unpause?topic=events"); code != http.StatusOK || billing.Stats().Paused || f.stats(t, "&topic=events").Topics[0].Paused {
		t.Fatalf("topic/unpause: %d %s", code, b)
	}
	// A channel paused on its own stays paused through a topic pause and
	// unpause.
	f.jobs.Pause()
	f.post(t, "/topic/pause?topic=jobs")
	f.post(t, "/topic/unpause?topic=jobs")
	if !f.jobs.Stats().Paused {
		t.Fatal("topic/unpause unpaused a channel the topic pause had not paused")
	}
}

func TestReadOnly(t *testing.T) {
	f := newFixture(t, true)
	for _, path := range []string{"/channel/pause?topic=jobs&channel=jobs", "/channel/empty?topic=jobs&channel=jobs", "/topic/pause?topic=jobs", "/channel/delete?topic=events&channel=audit"} {
		// Not 403: nsqadmin takes that for "use HTTPS".
		if code, b := f.post(t, path); code != http.StatusMethodNotAllowed || !strings.Contains(b, "READ_ONLY") {
			t.Errorf("%s: %d %s, want 405 READ_ONLY", path, code, b)
		}
	}
	if st := f.jobs.Stats(); st.Paused || f.jobs.Depth() != 5 || len(f.events.Channels()) != 2 {
		t.Fatalf("read-only handler changed state: paused %v depth %d channels %v", st.Paused, f.jobs.Depth(), f.events.Channels())
	}
	if s := f.stats(t, ""); len(s.Topics) != 2 {
		t.Fatalf("read-only /stats: %+v", s)
	}
}

func TestHealthEndpoints(t *testing.T) {
	f := newFixture(t, false)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, b := f.get(t, path); code != http.StatusOK || !strings.Contains(string(b), `"status":"ok"`) {
			t.Fatalf("%s: %d %s", path, code, b)
		}
	}
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if err := f.jobs.Put(ctx, []byte("more")); err != nil {
			t.Fatal(err)
		}
	}
	// Degraded: depth 105 beyond 100. Alive, not ready.
	if code, b := f.get(t, "/healthz"); code != http.StatusOK || !strings.Contains(string(b), `"status":"degraded"`) {
		t.Fatalf("/healthz degraded: %d %s", code, b)
	}
	if code, b := f.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(string(b), "depth 105 beyond 100") {
		t.Fatalf("/readyz degraded: %d %s", code, b)
	}
	f.jobs.Close()
	if code, b := f.get(t, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(string(b), `"status":"failed"`) || !strings.Contains(string(b), "jobs: closed") {
		t.Fatalf("/healthz closed: %d %s", code, b)
	}
}

func channelDepth(t *spillq.Topic, name string) int64 {
	for _, c := range t.Stats().Channels {
		if c.Name == name {
			return c.Cursor.Depth + c.Timers
		}
	}
	return -1
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
