package nsqhttp

import (
	"net/http"
	"slices"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// The /stats schema, nsqd's. Every count is an integer type: nsqadmin
// decodes them into int64 and fails the whole read (a 502 on its pages) on
// a number written as 14.0.

type statsResponse struct {
	Version   string        `json:"version"`
	Health    string        `json:"health"`
	StartTime int64         `json:"start_time"`
	Topics    []topicStats  `json:"topics"`
	Producers []clientStats `json:"producers"`
}

type topicStats struct {
	TopicName    string         `json:"topic_name"`
	Channels     []channelStats `json:"channels"`
	Depth        int64          `json:"depth"`
	BackendDepth int64          `json:"backend_depth"`
	MessageCount int64          `json:"message_count"`
	MessageBytes int64          `json:"message_bytes"`
	Paused       bool           `json:"paused"`
	// Never nil: nsqadmin reads it without a check.
	E2eProcessingLatency *latency `json:"e2e_processing_latency"`
}

type channelStats struct {
	ChannelName   string        `json:"channel_name"`
	Depth         int64         `json:"depth"`
	BackendDepth  int64         `json:"backend_depth"`
	InFlightCount int64         `json:"in_flight_count"`
	DeferredCount int64         `json:"deferred_count"`
	MessageCount  int64         `json:"message_count"`
	RequeueCount  int64         `json:"requeue_count"`
	TimeoutCount  int64         `json:"timeout_count"`
	ClientCount   int           `json:"client_count"`
	Clients       []clientStats `json:"clients"`
	Paused        bool          `json:"paused"`
	// Never nil: a null here crashes nsqadmin.
	E2eProcessingLatency *latency `json:"e2e_processing_latency"`
}

// latency is nsqd's quantile.Result: percentiles null when there are none.
type latency struct {
	Count       int64        `json:"count"`
	Percentiles []percentile `json:"percentiles"`
}

// merge adds o to l: nsqd's topic figure merges its channels' samples;
// spillq keeps each channel's histogram, so the topic's percentile is its
// slowest channel's. nsqadmin's topic page heads the channels' latency
// columns from the topic's percentiles, so they must be there.
func (l *latency) merge(o *latency) {
	l.Count += o.Count
	for _, p := range o.Percentiles {
		i := slices.IndexFunc(l.Percentiles, func(q percentile) bool { return q.Quantile == p.Quantile })
		if i < 0 {
			l.Percentiles = append(l.Percentiles, p)
		} else {
			l.Percentiles[i].Value = max(l.Percentiles[i].Value, p.Value)
		}
	}
}

type percentile struct {
	Quantile float64 `json:"quantile"`
	Value    int64   `json:"value"` // nanoseconds
}

type clientStats struct {
	ClientID      string `json:"client_id"`
	Hostname      string `json:"hostname"`
	Version       string `json:"version"`
	RemoteAddress string `json:"remote_address"`
	State         int32  `json:"state"`
	ReadyCount    int64  `json:"ready_count"`
	InFlightCount int64  `json:"in_flight_count"`
	MessageCount  int64  `json:"message_count"`
	FinishCount   int64  `json:"finish_count"`
	RequeueCount  int64  `json:"requeue_count"`
	ConnectTime   int64  `json:"connect_ts"`
	SampleRate    int32  `json:"sample_rate"`
	Deflate       bool   `json:"deflate"`
	Snappy        bool   `json:"snappy"`
	UserAgent     string `json:"user_agent"`
	TLS           bool   `json:"tls"`
}

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	topic, ch := qs.Get("topic"), qs.Get("channel")
	clients := qs.Get("include_clients") != "false" // nsqd's default: true
	resp := statsResponse{Version: h.opts.Version, Health: "OK", StartTime: h.start.Unix(), Topics: []topicStats{}, Producers: []clientStats{}}
	if hf := h.opts.Health; hf != nil {
		if hr := hf(); hr.Status != spillq.HealthOK {
			resp.Health = hr.String()
		}
	}
	var names []string
	for name := range h.opts.Queues {
		names = append(names, name)
	}
	for name := range h.opts.Topics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if topic != "" && name != topic {
			continue
		}
		var ts topicStats
		if q := h.opts.Queues[name]; q != nil {
			ts = h.queueStats(name, q, clients)
		} else {
			ts = h.topicStats(name, h.opts.Topics[name], clients)
		}
		if topic != "" && ch != "" {
			// nsqd lists only the channel asked for, under its topic.
			ts.Channels = slices.DeleteFunc(ts.Channels, func(c channelStats) bool { return c.ChannelName != ch })
		}
		resp.Topics = append(resp.Topics, ts)
	}
	writeJSON(w, resp)
}

func (h *Handler) queueStats(name string, q *spillq.Queue, clients bool) topicStats {
	s := q.Stats()
	cs := openChannelStats(name, s)
	cs.MessageCount = s.Puts
	h.addClients(&cs, name, "", clients)
	return topicStats{
		TopicName:            name,
		Channels:             []channelStats{cs},
		MessageCount:         s.Puts,
		Paused:               h.isTopicPaused(name),
		E2eProcessingLatency: cs.E2eProcessingLatency,
	}
}

func (h *Handler) topicStats(name string, t *spillq.Topic, clients bool) topicStats {
	s := t.Stats()
	ts := topicStats{
		TopicName:    name,
		Channels:     []channelStats{},
		MessageCount: s.Puts,
		Paused:       h.isTopicPaused(name),
	}
	if len(s.Channels) == 0 {
		// With no channel to take them, the messages wait in the topic.
		ts.Depth, ts.BackendDepth = s.Log.Depth, s.Log.Depth
	}
	agg := &latency{}
	for _, c := range s.Channels {
		var cs channelStats
		if c.Open {
			cs = openChannelStats(c.Name, c.Channel)
		} else {
			cs = channelStats{
				ChannelName:          c.Name,
				Depth:                c.Cursor.Depth,
				BackendDepth:         c.Cursor.Depth,
				DeferredCount:        c.Timers,
				E2eProcessingLatency: &latency{},
			}
		}
		cs.MessageCount = s.Puts
		h.addClients(&cs, name, c.Name, clients)
		agg.merge(cs.E2eProcessingLatency)
		ts.Channels = append(ts.Channels, cs)
	}
	ts.E2eProcessingLatency = agg
	return ts
}

// openChannelStats maps an open channel's figures onto nsqd's: depth is
// what waits for delivery (nsqd's memory channel and backend, where its
// requeued messages go too), in flight and deferred apart.
func openChannelStats(name string, s channel.Stats) channelStats {
	lat := &latency{Count: s.Finishes}
	if s.Finishes > 0 {
		lat.Percentiles = []percentile{
			{0.5, s.LatencyP50.Nanoseconds()},
			{0.99, s.LatencyP99.Nanoseconds()},
			{0.999, s.LatencyP999.Nanoseconds()},
		}
	}
	return channelStats{
		ChannelName:          name,
		Depth:                int64(s.MemoryDepth) + s.DiskDepth + int64(s.Ready),
		BackendDepth:         s.DiskDepth,
		InFlightCount:        int64(s.InFlight),
		DeferredCount:        int64(s.Deferred),
		RequeueCount:         s.Requeues,
		TimeoutCount:         s.Timeouts,
		Paused:               s.Paused,
		Clients:              []clientStats{},
		E2eProcessingLatency: lat,
	}
}

// addClients adds the workers on topic's channel ch (empty for a queue).
func (h *Handler) addClients(cs *channelStats, topic, ch string, include bool) {
	for _, w := range h.opts.Workers {
		if w.Topic != topic || (ch != "" && w.Channel != ch) {
			continue
		}
		cs.ClientCount++
		if !include {
			continue
		}
		s := w.Worker.Stats()
		cs.Clients = append(cs.Clients, clientStats{
			ClientID:      w.Name,
			Hostname:      w.Name,
			Version:       "V2",
			RemoteAddress: "in-process",
			State:         3, // nsqd's stateSubscribed
			InFlightCount: s.InProgress,
			MessageCount:  s.InProgress + s.Finished + s.Retried + s.DeadLettered + s.Failed + s.Snoozed + s.Released,
			FinishCount:   s.Finished,
			RequeueCount:  s.Retried + s.Snoozed + s.Released,
			ConnectTime:   h.start.Truncate(time.Second).Unix(),
			UserAgent:     "spillq-worker",
		})
	}
}
