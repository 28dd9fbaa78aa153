package spillq_test

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq"
)

// Benchmarks of a topic with N channels, every one consuming, side by side
// with nsqd's design of a topic reproduced in-process over go-diskqueue.
// ns/op is per Put, timed on the one producer only; e2e-ns/msg is the time
// from the first Put until every channel has finished every message,
// divided by b.N; cpu-ns/msg the CPU time the whole process spent over
// that span, per message (less sensitive than wall time to other processes
// on a busy machine). disk-B/msg is what the queues' files hold per message put
// (their own accounting: spillq's Log.Stats().DiskBytes growth; for
// go-diskqueue the 4-byte length and the record of every write to every
// queue), wr-B/msg what the kernel counted this process dirtying for the
// disk (/proc/self/io write_bytes: every file, cursors and metadata
// included; 0 where /proc does not say).
//
//	go test -run '^$' -bench 'TopicPut' -count 5 -benchtime 200000x .
//
// Durability, the same sync policy on both sides (fsync every 2500 records
// or 2 s, nsqd's defaults):
//
//   - spillq (BenchmarkTopicPut): when Put returns the message is in the
//     log, in the kernel (a process crash loses nothing; a power cut loses
//     at most what was put since the last fsync). A channel's Finish sets
//     its acknowledgement bit, in the kernel: a finished message is not
//     delivered again after a process crash, an unfinished one is.
//   - nsqd's design (BenchmarkTopicPutNsqdDesign): when Put returns the
//     message is in the topic's go-diskqueue, in the kernel; the copies to
//     the channels' queues are made afterwards by the topic's pump.
//     go-diskqueue has no acknowledgement: a read takes the message off
//     the queue, and "finish" only drops it from nsqd's in-memory in-flight
//     table. A queue's read position reaches disk with its metadata at
//     each sync, so after a crash each queue replays what was read since
//     its last sync (the topic's too, so channels get copies again), and a
//     message read before that and not yet finished is lost.

var topicBenchChannels = []int{1, 4, 16}

// BenchmarkTopicPut: a spillq topic with default options (MemQueueSize 0:
// every message through the log) and N channels, each with one consumer
// goroutine doing Receive and Finish.
func BenchmarkTopicPut(b *testing.B) {
	for _, n := range topicBenchChannels {
		b.Run(fmt.Sprintf("channels=%d", n), func(b *testing.B) {
			tp, err := spillq.OpenTopic(b.TempDir(), spillq.TopicOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close() // Receive then returns ErrClosed, should a consumer still wait
			ctx := context.Background()
			gets := make([]func() error, n)
			for i := range gets {
				ch, err := tp.Channel(fmt.Sprintf("ch%02d", i), spillq.ChannelOptions{})
				if err != nil {
					b.Fatal(err)
				}
				gets[i] = receiveFinish(ctx, ch, nil)
			}
			body := make([]byte, 100)
			before := tp.Log().Stats()
			runTopicPut(b,
				func() error { return tp.Put(ctx, body) },
				gets,
				func() (int64, bool) {
					st := tp.Log().Stats()
					// DiskBytes falls when a finished segment is deleted;
					// the growth then no longer counts every write.
					return st.DiskBytes - before.DiskBytes, st.FirstSeq == before.FirstSeq
				})
		})
	}
}

// BenchmarkTopicPutNsqdDesign: nsqd's topic as closely as it runs
// in-process, with mem-queue-size 0. Put encodes the message as nsqd does
// (timestamp, attempts, 16-byte ID, body) into the topic's go-diskqueue;
// the topic's messagePump reads each one back, decodes it and puts a copy
// into every channel's go-diskqueue (nsqd's Channel.put: the memory chan
// is nil, so the backend); each channel's consumer reads its queue's
// ReadChan, decodes, starts the in-flight timeout (nsqd's map and
// priority queue) and finishes it (removes it from both). Every queue has
// nsqd's defaults: 100 MiB files, messages of 26 bytes to 1 MiB + 26,
// fsync every 2500 reads and writes or 2 s.
func BenchmarkTopicPutNsqdDesign(b *testing.B) {
	for _, n := range topicBenchChannels {
		b.Run(fmt.Sprintf("channels=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			var written atomic.Int64
			topic := newNsqdQueue("bench", dir, &written)
			chans := make([]*nsqdChannel, n)
			for i := range chans {
				chans[i] = &nsqdChannel{
					backend:  newNsqdQueue(fmt.Sprintf("bench:ch%02d", i), dir, &written),
					inFlight: map[[16]byte]*nsqdMsg{},
				}
			}
			exit := make(chan struct{})
			var pump sync.WaitGroup
			pump.Add(1)
			go func() {
				defer pump.Done()
				nsqdTopicPump(topic, chans, exit)
			}()
			defer func() {
				close(exit)
				pump.Wait()
				for _, c := range chans {
					c.backend.dq.Close()
				}
				topic.dq.Close()
			}()
			gets := make([]func() error, n)
			for i, c := range chans {
				gets[i] = func() error {
					var buf []byte
					select {
					case buf = <-c.backend.dq.ReadChan():
					case <-exit:
						return errors.New("closed")
					}
					m, err := nsqdDecode(buf)
					if err != nil {
						return err
					}
					m.attempts++
					if err := c.startInFlight(m, time.Minute); err != nil {
						return err
					}
					return c.finish(m.id)
				}
			}
			body := make([]byte, 100)
			var ids nsqdGUID
			runTopicPut(b,
				func() error {
					// nsqd's PUB: NewMessage(topic.GenerateID(), body), then
					// Topic.PutMessage: t.put, to the backend.
					m := &nsqdMsg{id: ids.next(), body: body, timestamp: time.Now().UnixNano()}
					return topic.put(m)
				},
				gets,
				func() (int64, bool) { return written.Load(), true })
		})
	}
}

// runTopicPut runs consumers, each calling its get b.N times, and one
// producer calling put b.N times; the timer runs for the puts only. It
// reports e2e-ns/msg (first Put to the last channel's last message),
// disk-B/msg (from diskBytes, if it says its figure is whole) and wr-B/msg
// (/proc/self/io write_bytes).
func runTopicPut(b *testing.B, put func() error, gets []func() error, diskBytes func() (int64, bool)) {
	var wg sync.WaitGroup
	for _, get := range gets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := get(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	w0 := procWriteBytes()
	d0, _ := diskBytes()
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	for range b.N {
		if err := put(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	wg.Wait()
	e2e := time.Since(start)
	cpu := processCPU() - cpu0
	b.ReportMetric(float64(e2e.Nanoseconds())/float64(b.N), "e2e-ns/msg")
	if cpu0 >= 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
	}
	if d1, whole := diskBytes(); whole {
		b.ReportMetric(float64(d1-d0)/float64(b.N), "disk-B/msg")
	} else {
		b.Logf("segments were deleted during the run: no disk-B/msg (use a smaller -benchtime)")
	}
	if w0 >= 0 {
		b.ReportMetric(float64(procWriteBytes()-w0)/float64(b.N), "wr-B/msg")
	}
}

// processCPU is the CPU time (user and system, every thread) this process
// has used, from /proc/self/stat in clock ticks (assumed 100 a second,
// Linux's USER_HZ), or -1 where /proc does not say.
func processCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// procWriteBytes is /proc/self/io's write_bytes: the bytes this process
// caused to be sent to storage (counted as it dirties page-cache pages,
// through write(2) or a shared mapping), or -1 where /proc does not say.
func procWriteBytes() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// nsqd's message and its on-disk form (nsqd's Message.WriteTo and
// decodeMessage).
const nsqdMinValidMsgLength = 16 + 8 + 2 // ID, timestamp, attempts

type nsqdMsg struct {
	id        [16]byte
	body      []byte
	timestamp int64
	attempts  uint16
	// in flight
	pri   int64
	index int
}

func nsqdEncode(buf *bytes.Buffer, m *nsqdMsg) {
	var h [10]byte
	binary.BigEndian.PutUint64(h[:8], uint64(m.timestamp))
	binary.BigEndian.PutUint16(h[8:10], m.attempts)
	buf.Write(h[:])
	buf.Write(m.id[:])
	buf.Write(m.body)
}

func nsqdDecode(b []byte) (*nsqdMsg, error) {
	if len(b) < nsqdMinValidMsgLength {
		return nil, fmt.Errorf("invalid message buffer size (%d)", len(b))
	}
	m := &nsqdMsg{
		timestamp: int64(binary.BigEndian.Uint64(b[:8])),
		attempts:  binary.BigEndian.Uint16(b[8:10]),
		body:      b[nsqdMinValidMsgLength:],
	}
	copy(m.id[:], b[10:nsqdMinValidMsgLength])
	return m, nil
}

// nsqdGUID stands in for nsqd's guidFactory (a mutex and a counter) and
// its hex encoding into the 16-byte MessageID.
type nsqdGUID struct {
	mu sync.Mutex
	n  uint64
}

func (g *nsqdGUID) next() [16]byte {
	g.mu.Lock()
	g.n++
	n := g.n
	g.mu.Unlock()
	var id [16]byte
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		id[i] = hex[n&0xf]
		n >>= 4
	}
	return id
}

// nsqdQueue is a topic's or a channel's backend: a go-diskqueue with
// nsqd's default options, and what nsqd's writeMessageToBackend does
// around its Put (a pooled buffer, the message encoded into it). written
// counts what go-diskqueue appends to its files for each Put: a 4-byte
// length and the record.
type nsqdQueue struct {
	dq      godiskqueue.Interface
	written *atomic.Int64
}

var nsqdBufPool = sync.Pool{New: func() any { return &bytes.Buffer{} }}

func newNsqdQueue(name, dir string, written *atomic.Int64) *nsqdQueue {
	nop := func(godiskqueue.LogLevel, string, ...interface{}) {}
	// nsqd: MaxBytesPerFile 100 MiB, MaxMsgSize 1 MiB, SyncEvery 2500,
	// SyncTimeout 2 s.
	dq := godiskqueue.New(name, dir, 100<<20, nsqdMinValidMsgLength, 1<<20+nsqdMinValidMsgLength, 2500, 2*time.Second, nop)
	return &nsqdQueue{dq: dq, written: written}
}

// put is nsqd's Topic.put and Channel.put with mem-queue-size 0:
// writeMessageToBackend.
func (q *nsqdQueue) put(m *nsqdMsg) error {
	buf := nsqdBufPool.Get().(*bytes.Buffer)
	buf.Reset()
	nsqdEncode(buf, m)
	err := q.dq.Put(buf.Bytes()) // go-diskqueue copies it before Put returns
	if err == nil {
		q.written.Add(int64(4 + buf.Len()))
	}
	nsqdBufPool.Put(buf)
	return err
}

// nsqdTopicPump is nsqd's Topic.messagePump: each message read from the
// topic's queue is decoded and put into every channel, the first channel
// getting the decoded message, each other a new copy.
func nsqdTopicPump(topic *nsqdQueue, chans []*nsqdChannel, exit <-chan struct{}) {
	for {
		var buf []byte
		select {
		case buf = <-topic.dq.ReadChan():
		case <-exit:
			return
		}
		msg, err := nsqdDecode(buf)
		if err != nil {
			continue
		}
		for i, c := range chans {
			chanMsg := msg
			if i > 0 {
				chanMsg = &nsqdMsg{id: msg.id, body: msg.body, timestamp: msg.timestamp}
			}
			c.putMessage(chanMsg)
		}
	}
}

// nsqdChannel is nsqd's Channel as far as this workload reaches: its
// backend and its in-flight table (a map by ID and a priority queue by
// deadline, each under its own mutex, as nsqd has them).
type nsqdChannel struct {
	mu           sync.RWMutex // nsqd's Channel RWMutex, read-locked around put
	backend      *nsqdQueue
	messageCount atomic.Uint64

	inFlightMu   sync.Mutex
	inFlight     map[[16]byte]*nsqdMsg
	inFlightPQMu sync.Mutex
	inFlightPQ   nsqdPQ
}

func (c *nsqdChannel) putMessage(m *nsqdMsg) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if err := c.backend.put(m); err != nil {
		return // nsqd logs it and drops the message
	}
	c.messageCount.Add(1)
}

func (c *nsqdChannel) startInFlight(m *nsqdMsg, timeout time.Duration) error {
	m.pri = time.Now().Add(timeout).UnixNano()
	c.inFlightMu.Lock()
	if _, ok := c.inFlight[m.id]; ok {
		c.inFlightMu.Unlock()
		return errors.New("ID already in flight")
	}
	c.inFlight[m.id] = m
	c.inFlightMu.Unlock()
	c.inFlightPQMu.Lock()
	heap.Push(&c.inFlightPQ, m)
	c.inFlightPQMu.Unlock()
	return nil
}

func (c *nsqdChannel) finish(id [16]byte) error {
	c.inFlightMu.Lock()
	m, ok := c.inFlight[id]
	if ok {
		delete(c.inFlight, id)
	}
	c.inFlightMu.Unlock()
	if !ok {
		return errors.New("ID not in flight")
	}
	c.inFlightPQMu.Lock()
	if m.index >= 0 && m.index < len(c.inFlightPQ) && c.inFlightPQ[m.index] == m {
		heap.Remove(&c.inFlightPQ, m.index)
	}
	c.inFlightPQMu.Unlock()
	return nil
}

// nsqdPQ is nsqd's inFlightPqueue: a min-heap on pri, each message
// knowing its index.
type nsqdPQ []*nsqdMsg

func (q nsqdPQ) Len() int           { return len(q) }
func (q nsqdPQ) Less(i, j int) bool { return q[i].pri < q[j].pri }
func (q nsqdPQ) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *nsqdPQ) Push(x any) {
	m := x.(*nsqdMsg)
	m.index = len(*q)
	*q = append(*q, m)
}
func (q *nsqdPQ) Pop() any {
	old := *q
	m := old[len(old)-1]
	old[len(old)-1] = nil
	m.index = -1
	*q = old[:len(old)-1]
	return m
}
