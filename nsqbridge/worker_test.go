package nsqbridge_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/nsqbridge"
)

// jobHandler is one handler, written once: the test runs it over an
// embedded queue and over nsqd, and both must end every job alike.
type jobHandler struct {
	mu       sync.Mutex
	attempts map[string][]uint16
	ended    chan string // each job's body, once it is done with for good
}

func newJobHandler() *jobHandler {
	return &jobHandler{attempts: map[string][]uint16{}, ended: make(chan string, 16)}
}

func (h *jobHandler) handle(ctx context.Context, m *channel.Message) error {
	body := string(m.Body)
	h.mu.Lock()
	h.attempts[body] = append(h.attempts[body], m.Attempts)
	h.mu.Unlock()
	switch body {
	case "ok":
		h.ended <- body
		return nil
	case "flaky":
		if m.Attempts < 2 {
			return errors.New("not yet")
		}
		h.ended <- body
		return nil
	case "bad":
		return spillq.Permanent(errors.New("unparsable"))
	case "slow": // three of its source's timeouts long: kept alive by Touch
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		h.ended <- body
		return nil
	}
	return errors.New("unknown job")
}

func (h *jobHandler) deadLetter(m *channel.Message, reason error) error {
	if !errors.Is(reason, channel.ErrFailed) {
		return errors.New("only bad should be dead-lettered")
	}
	h.ended <- "dead:" + string(m.Body)
	return nil
}

// run works src with h until every job ended, then stops the worker and
// returns each job's attempts.
func (h *jobHandler) run(t *testing.T, src channel.Receiver) map[string][]uint16 {
	t.Helper()
	w, err := spillq.NewWorker(src, h.handle, spillq.WorkerOptions{Concurrency: 4, Backoff: func(uint16, error) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	ended := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for len(ended) < 4 {
		select {
		case b := <-h.ended:
			ended[b] = true
		case <-deadline:
			t.Fatalf("jobs ended after 60 s: %v, want ok, flaky, slow and dead:bad", ended)
		}
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"ok", "flaky", "slow", "dead:bad"} {
		if !ended[b] {
			t.Errorf("%s did not end", b)
		}
	}
	if st := w.Stats(); st.AnswerErrors != 0 {
		t.Errorf("worker stats %+v: an answer was refused", st)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.attempts
}

// TestWorkerOverNSQD: the same handler over an embedded queue and over a
// real nsqd through a Consumer ends every job the same way: finished,
// retried then finished, dead-lettered at once, and a job three timeouts
// long finished on its first delivery (the worker touches it at nsqd).
func TestWorkerOverNSQD(t *testing.T) {
	t.Parallel()
	jobs := []string{"ok", "flaky", "bad", "slow"}
	const timeout = time.Second

	embedded := newJobHandler()
	q, err := spillq.Open(t.TempDir(), spillq.Options{MsgTimeout: timeout, MaxAttempts: 3, DeadLetter: embedded.deadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, j := range jobs {
		if err := q.Put(context.Background(), []byte(j)); err != nil {
			t.Fatal(err)
		}
	}
	local := embedded.run(t, q)

	nsqd := startNSQD(t)
	p := openPublisher(t, t.TempDir(), nsqd)
	defer p.Close()
	for _, j := range jobs {
		if err := p.Publish(context.Background(), []byte(j)); err != nil {
			t.Fatal(err)
		}
	}
	syncPublisher(t, p)
	remote := newJobHandler()
	c := newConsumer(t, nsqbridge.ConsumerOptions{NSQD: []string{nsqd.TCP}, MsgTimeout: timeout, MaxAttempts: 3, DeadLetter: remote.deadLetter})
	defer c.Close()
	overNSQD := remote.run(t, c)

	want := map[string][]uint16{"ok": {1}, "flaky": {1, 2}, "bad": {1}, "slow": {1}}
	for _, j := range jobs {
		if !slices.Equal(local[j], want[j]) || !slices.Equal(overNSQD[j], want[j]) {
			t.Errorf("%s: attempts %v embedded, %v over nsqd; want %v on both", j, local[j], overNSQD[j], want[j])
		}
	}
	if st := c.Stats(); st.TimedOut != 0 || st.DeadLetters != 1 {
		t.Errorf("consumer stats %+v: want no timeout and one dead letter", st)
	}
}
