// Package nsqhttp serves spillq's queues and topics through the part of
// nsqd's HTTP API that nsqadmin reads, so an NSQ operator's nsqadmin
// shows a service's embedded queues, and pauses, empties and deletes their
// channels, unchanged:
//
//	h, err := nsqhttp.New(nsqhttp.Options{
//		Queues: map[string]*spillq.Queue{"jobs": jobs},
//		Topics: map[string]*spillq.Topic{"events": events},
//	})
//	go http.Serve(ln, h) // ln: a loopback listener, say 127.0.0.1:4151
//
//	nsqadmin --nsqd-http-address=127.0.0.1:4151
//
// It is a package of its own so that spillq's core imports no net/http.
//
// # What it serves
//
// At the root of the server, as nsqd does (nsqadmin calls http://ADDR/info
// and the like, with no path prefix of its own):
//
//   - GET /ping: "OK".
//   - GET /info: version, hostname, broadcast_address, http_port, tcp_port,
//     start_time. nsqadmin sends every per-node stats read and every
//     action to broadcast_address:http_port, not to the address it was
//     given, so those must reach this handler: by default they are the host
//     and port the request named (what nsqadmin was given); set
//     Options.BroadcastAddress and HTTPPort when that is not reachable from
//     nsqadmin (behind a proxy, say).
//   - GET /stats (JSON in every format; nsqadmin asks for format=json),
//     honouring topic=, channel= and include_clients=, in nsqd's schema.
//   - POST /topic/pause, /topic/unpause, /channel/pause, /channel/unpause,
//     /channel/empty and /channel/delete, each with topic= (and channel=).
//
// Every other nsqd endpoint answers 501 with a message saying why: /pub and
// /mpub (put through the service's own code, which knows the message's
// meaning), /topic/create and /channel/create (a service opens its queues
// and channels itself), /topic/empty and /topic/delete (see below).
//
// # How spillq maps onto nsqd
//
// A [spillq.Queue] given as Options.Queues[name] is a topic called name with
// one channel, also called name. The topic holds nothing of its own (its
// depth is 0, as an nsqd topic's is once its channels have taken its
// messages); the channel's depth is what waits for delivery: in memory, on
// disk and requeued, with backend_depth the part on disk, so nsqadmin's
// "memory depth" (depth - backend_depth) is the memory buffer and the
// requeued. in_flight_count, deferred_count, requeue_count, timeout_count
// and message_count (the queue's Puts since Open) are the channel's own.
//
// A [spillq.Topic] given as Options.Topics[name] is a topic called name with
// its channels, open in this process or not. A channel not open reports its
// place in the log (depth and backend_depth are the records it has not
// finished; deferred_count its timer store), and can be deleted but not
// paused or emptied: the handler does not open channels. A topic with no
// channel reports the log's depth as its own. message_count is the topic's
// Puts since Open, for the topic and for each of its channels (every channel
// receives every message).
//
// e2e_processing_latency is always an object, as nsqd sends it (nsqadmin
// reads it without a nil check): count is the messages finished, and the
// percentiles (0.5, 0.99, 0.999, in nanoseconds) are spillq's, over every
// finish since Open rather than nsqd's sliding window; null until one has
// finished, as nsqd's are when it keeps none. A topic's are its slowest
// channel's (nsqadmin heads the channels' latency columns with them).
//
// Options.Workers are shown as the clients of their channels: a
// [spillq.Worker]'s handlers in progress as in_flight_count, what it
// finished as finish_count, what it gave back (retried, snoozed, released)
// as requeue_count, every outcome and those in progress as message_count.
//
// A topic pause pauses every open channel of the topic that is not paused
// already (spillq has no topic-level pause; a paused nsqd topic stops
// feeding its channels, and a spillq channel paused stops delivering, so
// what consumers see is the same), and unpause unpauses those it paused.
// A channel opened after the pause is not paused by it. Topic empty is
// refused: an nsqd topic's own messages are those not yet copied to its
// channels, and a spillq topic has none; empty its channels instead.
//
// # Access
//
// The actions change state, and none of nsqd's endpoints carries
// authentication. Set Options.ReadOnly to refuse every action (405), bind
// the listener to loopback, or serve the handler behind the service's own
// authentication. A refusal is not answered 403: nsqadmin takes a 403 for
// "use HTTPS" and retries elsewhere.
package nsqhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
)

// DefaultVersion is the version /info reports unless Options.Version says
// otherwise: the nsqd release whose API the handler serves. nsqadmin parses
// it as strict semver (no leading "v").
const DefaultVersion = "1.3.0"

// Options configure a Handler.
type Options struct {
	// Queues are served as topics of one channel each, both called by
	// the map key.
	Queues map[string]*spillq.Queue
	// Topics are served with their channels, by the map key.
	Topics map[string]*spillq.Topic
	// Workers are shown as clients of their channels.
	Workers []Worker

	// ReadOnly refuses every action (pause, unpause, empty, delete) with
	// 405; reads are served as usual.
	ReadOnly bool

	// BroadcastAddress and HTTPPort are what /info tells nsqadmin to send
	// its stats reads and actions to. Empty and 0 take the host and port
	// of the /info request's Host header: the address nsqadmin was given.
	BroadcastAddress string
	HTTPPort         int
	// Hostname is /info's and the nodes list's name for this process;
	// empty means os.Hostname.
	Hostname string
	// Version is /info's version; empty means DefaultVersion. It must be
	// semver without a leading "v".
	Version string
	// Health, when set, is served at /healthz and /readyz (see
	// [HealthHandler]) beside the nsqd API.
	Health func() spillq.Health
}

// Worker names a worker and the channel it consumes, for /stats' clients.
type Worker struct {
	// Topic is the queue's or topic's name (a key of Options.Queues or
	// Options.Topics); Channel is a topic's channel, or empty for a queue.
	Topic, Channel string
	// Name is the client's client_id and hostname in nsqadmin.
	Name   string
	Worker *spillq.Worker
}

// Handler serves the nsqd HTTP API over spillq queues and topics. It is
// safe for concurrent use.
type Handler struct {
	opts  Options
	start time.Time
	mux   *http.ServeMux

	// mu guards topicPaused: per topic, the channels a topic pause paused,
	// which its unpause unpauses (nil when the topic is not paused).
	mu          sync.Mutex
	topicPaused map[string][]pausable
}

// pausable is what the handler does to a queue or a topic's channel (a
// *spillq.Queue or *spillq.Channel).
type pausable interface {
	Pause()
	Unpause()
	Empty() error
	Stats() channel.Stats
}

// New returns a Handler serving opts' queues and topics. A name given to
// both a queue and a topic, a worker naming neither, or a Version that is
// not semver is refused.
func New(opts Options) (*Handler, error) {
	for name := range opts.Queues {
		if _, ok := opts.Topics[name]; ok {
			return nil, fmt.Errorf("nsqhttp: %q names both a queue and a topic", name)
		}
		if opts.Queues[name] == nil {
			return nil, fmt.Errorf("nsqhttp: queue %q is nil", name)
		}
	}
	for name, t := range opts.Topics {
		if t == nil {
			return nil, fmt.Errorf("nsqhttp: topic %q is nil", name)
		}
	}
	for _, w := range opts.Workers {
		_, isQueue := opts.Queues[w.Topic]
		_, isTopic := opts.Topics[w.Topic]
		switch {
		case w.Worker == nil:
			return nil, fmt.Errorf("nsqhttp: worker %q is nil", w.Name)
		case !isQueue && !isTopic:
			return nil, fmt.Errorf("nsqhttp: worker %q consumes %q, which is neither a queue nor a topic given", w.Name, w.Topic)
		case isTopic && w.Channel == "":
			return nil, fmt.Errorf("nsqhttp: worker %q consumes topic %q and names no channel", w.Name, w.Topic)
		}
	}
	if opts.Version == "" {
		opts.Version = DefaultVersion
	}
	if !strictSemver(opts.Version) {
		return nil, fmt.Errorf("nsqhttp: version %q is not semver (MAJOR.MINOR.PATCH, no leading v): nsqadmin would not parse it", opts.Version)
	}
	if opts.Hostname == "" {
		opts.Hostname, _ = os.Hostname()
	}
	h := &Handler{opts: opts, start: time.Now(), topicPaused: map[string][]pausable{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "OK")
	})
	mux.HandleFunc("GET /info", h.info)
	mux.HandleFunc("GET /stats", h.stats)
	for path, act := range map[string]func(*http.Request) error{
		"/topic/pause":     h.pauseTopic,
		"/topic/unpause":   h.unpauseTopic,
		"/channel/pause":   h.channelAction(func(c pausable) error { c.Pause(); return nil }),
		"/channel/unpause": h.channelAction(func(c pausable) error { c.Unpause(); return nil }),
		"/channel/empty":   h.channelAction(pausable.Empty),
		"/channel/delete":  h.deleteChannel,
	} {
		mux.HandleFunc(path, h.action(act))
	}
	for path, why := range notServed {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotImplemented, why)
		})
	}
	if opts.Health != nil {
		mux.Handle("GET /healthz", HealthHandler(opts.Health, false))
		mux.Handle("GET /readyz", HealthHandler(opts.Health, true))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NOT_FOUND")
	})
	h.mux = mux
	return h, nil
}

// notServed are nsqd's endpoints the handler refuses, with the reason.
var notServed = map[string]string{
	"/pub":            "NOT_SERVED: spillq serves no /pub; put through the service's own code",
	"/mpub":           "NOT_SERVED: spillq serves no /mpub; put through the service's own code",
	"/topic/create":   "NOT_SERVED: a service opens its own queues and topics (spillq.Open, spillq.OpenTopic)",
	"/channel/create": "NOT_SERVED: a service opens its own channels (Topic.Channel)",
	"/topic/delete":   "NOT_SERVED: a spillq queue or topic belongs to the service that opened it",
	"/topic/empty":    "NOT_SERVED: a spillq topic holds no messages apart from its channels; empty its channels",
}

// ServeHTTP serves the nsqd API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// nsqd's version 1 responses carry this header; clients of the API
	// other than nsqadmin look for it.
	w.Header().Set("X-NSQ-Content-Type", "nsq; version=1.0")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	addr, port := h.opts.BroadcastAddress, h.opts.HTTPPort
	if addr == "" || port == 0 {
		host, p, err := net.SplitHostPort(r.Host)
		if err != nil {
			// A Host without a port: the scheme's default.
			host, p = r.Host, "80"
			if r.TLS != nil {
				p = "443"
			}
		}
		if addr == "" {
			addr = host
		}
		if port == 0 {
			port, _ = strconv.Atoi(p)
		}
	}
	writeJSON(w, struct {
		Version          string `json:"version"`
		BroadcastAddress string `json:"broadcast_address"`
		Hostname         string `json:"hostname"`
		HTTPPort         int    `json:"http_port"`
		TCPPort          int    `json:"tcp_port"`
		StartTime        int64  `json:"start_time"`
	}{h.opts.Version, addr, h.opts.Hostname, port, -1, h.start.Unix()})
}

// action serves a state-changing endpoint: POST only, refused when
// read-only, and answered as nsqd does (200 and an empty body, or an
// error status and {"message": ...}).
func (h *Handler) action(do func(*http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
			return
		}
		if h.opts.ReadOnly {
			writeError(w, http.StatusMethodNotAllowed, "READ_ONLY: this spillq handler serves reads only")
			return
		}
		if err := do(r); err != nil {
			var he *httpError
			if errors.As(err, &he) {
				writeError(w, he.status, he.msg)
				return
			}
			writeError(w, http.StatusInternalServerError, "INTERNAL_ERROR: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
	}
}

type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status, fmt.Sprintf(format, args...)}
}

// lookup finds the topic= (and, with wantChannel, channel=) of r.
func (h *Handler) lookup(r *http.Request, wantChannel bool) (name, ch string, q *spillq.Queue, t *spillq.Topic, err error) {
	name = r.URL.Query().Get("topic")
	if name == "" {
		return "", "", nil, nil, errorf(http.StatusBadRequest, "MISSING_ARG_TOPIC")
	}
	q, t = h.opts.Queues[name], h.opts.Topics[name]
	if q == nil && t == nil {
		return "", "", nil, nil, errorf(http.StatusNotFound, "TOPIC_NOT_FOUND")
	}
	if !wantChannel {
		return name, "", q, t, nil
	}
	ch = r.URL.Query().Get("channel")
	if ch == "" {
		return "", "", nil, nil, errorf(http.StatusBadRequest, "MISSING_ARG_CHANNEL")
	}
	if q != nil && ch != name {
		return "", "", nil, nil, errorf(http.StatusNotFound, "CHANNEL_NOT_FOUND: queue %q has one channel, %q", name, name)
	}
	if t != nil && !slices.Contains(t.Channels(), ch) {
		return "", "", nil, nil, errorf(http.StatusNotFound, "CHANNEL_NOT_FOUND")
	}
	return name, ch, q, t, nil
}

// openChannel returns the channel ch of topic t if it is open in this
// process. The handler opens none itself: a channel it opened would hold
// its messages in memory with no consumer; so it asks Lookup, which opens
// nothing, where a check and then Topic.Channel would open one that closed
// in between, with default options.
func openChannel(t *spillq.Topic, ch string) (*spillq.Channel, error) {
	if c, ok := t.Lookup(ch); ok {
		return c, nil
	}
	return nil, errorf(http.StatusConflict, "CHANNEL_NOT_OPEN: channel %q is not open in this process; open it to pause or empty it", ch)
}

func (h *Handler) channelAction(do func(pausable) error) func(*http.Request) error {
	return func(r *http.Request) error {
		_, ch, q, t, err := h.lookup(r, true)
		if err != nil {
			return err
		}
		if q != nil {
			return do(q)
		}
		c, err := openChannel(t, ch)
		if err != nil {
			return err
		}
		return do(c)
	}
}

func (h *Handler) deleteChannel(r *http.Request) error {
	name, ch, q, t, err := h.lookup(r, true)
	if err != nil {
		return err
	}
	if q != nil {
		return errorf(http.StatusNotImplemented, "NOT_SERVED: queue %q's channel is the queue itself; it cannot be deleted", name)
	}
	return t.DeleteChannel(ch)
}

// openChannels returns the channels of a queue or topic open in this
// process.
func openChannels(q *spillq.Queue, t *spillq.Topic) []pausable {
	if q != nil {
		return []pausable{q}
	}
	var out []pausable
	for _, name := range t.Channels() {
		if c, err := openChannel(t, name); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func (h *Handler) pauseTopic(r *http.Request) error {
	name, _, q, t, err := h.lookup(r, false)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	paused := h.topicPaused[name]
	if paused == nil {
		paused = []pausable{} // paused, even with no channel to pause
	}
	for _, c := range openChannels(q, t) {
		if !c.Stats().Paused {
			c.Pause()
			paused = append(paused, c)
		}
	}
	h.topicPaused[name] = paused
	return nil
}

func (h *Handler) unpauseTopic(r *http.Request) error {
	name, _, _, _, err := h.lookup(r, false)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.topicPaused[name] {
		c.Unpause()
	}
	delete(h.topicPaused, name)
	return nil
}

func (h *Handler) isTopicPaused(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.topicPaused[name] != nil
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "INTERNAL_ERROR: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(b)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{msg})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

// strictSemver says v is MAJOR.MINOR.PATCH with an optional -pre and
// +build, as the semver package nsqadmin uses parses it.
func strictSemver(v string) bool {
	core, _, _ := strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(core, "-")
	if hasPre && pre == "" {
		return false
	}
	fields := strings.Split(core, ".")
	if len(fields) != 3 {
		return false
	}
	for _, f := range fields {
		if f == "" || (len(f) > 1 && f[0] == '0') || strings.Trim(f, "0123456789") != "" {
			return false
		}
	}
	return true
}
