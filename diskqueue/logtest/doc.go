// Package logtest is the conformance suite of the seam between delivery and
// storage: it checks that an implementation of [channel.Log] and
// [channel.Cursor] does what their documentation says, as River's
// riverdrivertest does for its drivers. Every implementation runs the same
// suite: [diskqueue.Log] with [diskqueue.Cursor], the in-memory test store,
// the go-diskqueue adapter.
//
// # Running it for a new implementation
//
// Write an [Opener] that opens an empty store in a fresh place (a
// t.TempDir, a new map) with the limits of the [Config] it is given, and
// call [Run] from a test:
//
//	func TestConformance(t *testing.T) {
//		logtest.Run(t, func(t *testing.T, cfg logtest.Config) logtest.Store {
//			l := mystore.New(mystore.Options{MaxRecordBytes: cfg.MaxRecordBytes, MinRecordBytes: cfg.MinRecordBytes})
//			return logtest.Store{Store: channel.Store{Log: l, Cursor: l.Cursor(), Close: l.Close}}
//		})
//	}
//
// Only Log and Cursor are required. Store.Close, when set, releases the
// store; the suite calls it once, at the end of each subtest or earlier
// to check that a blocked ReadBatch returns [channel.ErrClosed].
// Store.NewCursor (a second reader of the same log) and Store.Reopen (the
// same storage opened again after Close) are set by implementations that
// have them; without them the suite says, with t.Log, what it did not
// check and why.
//
// # What it checks
//
//   - Append: seqs are dense and start at NextSeq, whether a record comes
//     from Put, PutSeq or PutBatch; PutBatch stores a prefix and says how
//     long; no method keeps the caller's buffer; an error other than
//     [channel.ErrNotDurable] means nothing was stored (a cancelled ctx
//     included); Sync succeeds.
//   - Limits: a body longer than MaxRecordBytes or shorter than
//     MinRecordBytes is refused with [diskqueue.ErrRecordTooLarge] or
//     [diskqueue.ErrRecordTooSmall], and nothing is stored; bodies at the
//     limits are stored.
//   - Read: ReadAt finds every record not acknowledged, refuses a seq never
//     written with [diskqueue.ErrNotFound], and after an ack either finds
//     the same record (retained) or says ErrNotFound; Scan yields exactly
//     its range in order and stops when the loop breaks; ReadBatch hands
//     out records in seq order, waits for a Put, returns the ctx's error
//     at once when the ctx ends (and loses no record for it), and returns
//     ErrClosed when the store closes under it.
//   - Ack: acks in any order; Acknowledged (the cursor's own, and the
//     log's over every cursor); Floor moves only past a prefix of acks;
//     Depth counts records put and not acknowledged, in flight included;
//     a second ack, or an ack of a seq never written, changes nothing;
//     Empty acknowledges everything and Discarded then says so for the
//     records in flight; Unacknowledged yields exactly the records not
//     acknowledged in its range.
//   - Cursor: Unread gives records back to be handed out first, in seq
//     order, even when given back in several calls out of order; two
//     cursors read and acknowledge independently; a reopened store keeps
//     its seqs and each cursor's unacknowledged records, and drops the
//     acknowledged ones.
//   - Concurrency: producers and readers at once (run with -race): every
//     record handed out and acknowledged exactly once, none lost, each
//     producer's records in the order it put them.
//
// # Capabilities an implementation lacks
//
// A method an implementation cannot carry returns an error wrapping
// [errors.ErrUnsupported] (PutSeq, PutBatch, ReadAt, Scan, Sync, Empty,
// Unread, Unacknowledged). The suite then logs that it did not check the
// method's behaviour, and checks instead that the method says so every
// time and changes nothing. No subtest is skipped.
//
// The suite waits for conditions, never for time: a wait that cannot end
// is cut after a generous guard, as a failure that names what it was
// waiting for.
package logtest
