package diskqueue

// SyncLatencySumSeconds returns the sum, in seconds, of the fsync durations
// counted in [Queue.SyncLatencyBuckets], exact: a histogram's _sum. Read
// after SyncLatencyBuckets, it may include a few fsyncs that came in
// between.
func (l *Log) SyncLatencySumSeconds() float64 {
	return l.syncLatency.SumSeconds()
}
