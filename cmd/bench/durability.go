package main

import "strings"

// A speed-up means little without what each side promises once its call
// returns, so the report prints that next to every figure. The promises,
// in docs/performance.md's words:
//
//   - memory: in the process only; a crash of it loses the record.
//   - kernel: in the page cache (write(2), or a copy into a shared
//     mapping); it survives a crash of the process, not a power cut.
//   - disk: fsynced; it survives a power cut.
const (
	spillqDefault   = "kernel; fsync every 2,500 records or 2 s; each Ack a bit in the kernel"
	godqDefault     = "kernel (write(2)); fsync every 2,500 records or 2 s, reads counted too; a record read is consumed"
	bigqueueNoFlush = "kernel (mapped arena); never fsynced (periodic flush off); Dequeue consumes the record"
	memoryOnly      = "memory: a crash of the process loses it"
	// godq.NewCompat, the go-diskqueue drop-in, with nsqd's settings.
	compatDefault = "kernel (a copy into a mapped segment); fsync every 2,500 records or 2 s; a record taken from ReadChan is consumed, recorded in the kernel before the next is handed out"

	// A job queue's promise has two ends: the job's, once enqueued, and
	// its acknowledgement's, once the worker has answered it.
	workerKernel    = spillqDefault + " (each Finish, when the worker answers)"
	workerDisk      = "disk: fsync per job, group commit, Put returns after it; each Finish a bit in the kernel, fsynced every 2 s"
	jetstreamKernel = "kernel: in the file store (write(2)) when PubAck arrives; fsync every 2 min (sync_interval)"
	jetstreamDisk   = "disk: fsynced before PubAck (SyncAlways)"
	ackSyncKernel   = "; each ack (DoubleAck) a tombstone in the kernel when it returns"
	ackSyncDisk     = "; each ack (DoubleAck) a tombstone fsynced when it returns"
	ackAsync        = "; each Ack fire and forget (a crash just after it can redeliver the job)"
)

// durabilityRules map a benchmark (its name up to the first '/', then its
// impl and, where it has one, its regime or durability) to its promise; the first rule
// that matches wins, and an empty impl or regime matches any.
var durabilityRules = []struct {
	bench, impl, regime, promise string
}{
	{"BenchmarkDrainRSS", "", "", ""}, // a resident set, not a speed
	{"BenchmarkCompatRatio", "", "", "godq: " + compatDefault + ". go-diskqueue: " + godqDefault},
	{"BenchmarkCompat", "godq", "", compatDefault},
	{"BenchmarkSyncEveryRecord", "spillq", "", "disk: fsync per record, group commit; Put returns after it"},
	{"BenchmarkSyncEveryRecord", "godiskqueue", "", "kernel: fsync per record, after its Put has returned"},
	{"BenchmarkSyncEveryRecord", "rawfsync", "", "disk: write(2) and fsync per record"},
	{"BenchmarkPut", "rawfile", "", "kernel: write(2) in 1 MiB writes, one fsync at the end"},
	{"BenchmarkPut", "rawfile-sync2500", "", "kernel: write(2), fsync every 2,500 records"},
	{"", "bigqueue", "", bigqueueNoFlush},
	{"BenchmarkChannelPut", "spillq", "memory", memoryOnly + " (MemQueueSize 4096, never full)"},
	{"BenchmarkChannelPut", "spillq", "spill", "kernel; fsync every 2,500 records or 2 s (the message's envelope in the log; Puts alone, no Ack)"},
	{"BenchmarkMemoryPath", "", "", memoryOnly},
	{"BenchmarkSpillPath", "spillq", "", spillqDefault + " (each Finish)"},
	{"BenchmarkSpillPath", "", "", godqDefault},
	{"BenchmarkSpillDrain", "", "", "each Finish (Ack) a bit in the kernel"},
	{"BenchmarkTopicPutNsqdDesign", "", "", godqDefault + "; each channel's copy made after Put returns"},
	{"BenchmarkTopicPut", "", "", spillqDefault + " (each channel's Finish)"},
	{"BenchmarkPublish", "bridge-accept", "", "kernel: in the local queue; forwarded to nsqd later"},
	{"BenchmarkPublish", "bridge-acked", "", "nsqd acknowledged every message (Sync)"},
	{"BenchmarkPublish", "", "", "nsqd acknowledged (in nsqd's memory or its disk queue)"},
	{"", "godiskqueue", "", godqDefault},
	{"", "spillq", "", spillqDefault},
	{"BenchmarkCursors", "", "", spillqDefault},
	{"", "spillq-worker", "kernel", workerKernel},
	{"", "spillq-worker", "disk", workerDisk},
	{"", "jetstream-acksync", "kernel", jetstreamKernel + ackSyncKernel},
	{"", "jetstream-acksync", "disk", jetstreamDisk + ackSyncDisk},
	{"", "jetstream-ack", "kernel", jetstreamKernel + ackAsync},
	{"", "jetstream-ack", "disk", jetstreamDisk + ackAsync},
}

// durability returns the promise under which r was measured, or "" for a
// benchmark where none applies (a lookup, Open, a resident-set size).
func durability(r result) string {
	bench, _, _ := strings.Cut(r.name, "/")
	impl, regime := r.param("impl"), r.param("regime")
	if regime == "" {
		// The job queue benchmarks name their regime by the promise it is.
		regime = r.param("durability")
	}
	for _, rule := range durabilityRules {
		if (rule.bench == "" || rule.bench == bench) && (rule.impl == "" || rule.impl == impl) && (rule.regime == "" || rule.regime == regime) {
			return rule.promise
		}
	}
	return ""
}
