// Package nsqbridge moves a spillq workload onto a real nsqd cluster when
// one machine is no longer enough, keeping spillq's disk queue as a
// store-and-forward buffer in front of it.
//
// # Publishing
//
// A [Publisher] makes every message durable in a local spillq disk queue
// first, then forwards it with github.com/nsqio/go-nsq to one of several
// nsqd nodes (a static list, nsqlookupd discovery, or both), in batches
// (MPUB) bounded by count and bytes; a local record is removed only after
// nsqd acknowledged it. While nsqd is down, slow or refusing, Publish keeps
// working into the local queue (bounded by its options) and the backlog is
// forwarded when a node returns. Delivery to nsqd is at least once: if nsqd
// took a batch but the acknowledgement was lost, the batch is sent again.
// [Publisher] describes the order guarantee across nodes.
//
// Each message carries its topic ([Publisher.PublishTo]) and, for a
// deferred publish ([Publisher.DeferredPublish], nsqd's DPUB), its due
// time through the local queue, in a small envelope (FORMAT.md, "Publisher
// envelope").
//
// Poison messages: Publish refuses what nsqd would refuse by the limits it
// knows (an empty body, one over MaxMsgSize, a bad topic name, a delay
// over MaxDelay). A message nsqd still refuses on its own (E_BAD_MESSAGE,
// E_BAD_BODY, E_BAD_TOPIC, E_INVALID: say its --max-msg-size is smaller
// than MaxMsgSize) goes to PublisherOptions.DeadLetter with the reason,
// is counted in Stats, and forwarding goes on; a batch nsqd refuses is
// sent again one message at a time to find it.
//
// [Publisher.Sync] waits until nsqd has acknowledged everything published
// before the call. [Publisher.Close] stops after the batches in flight and
// leaves the backlog on disk for the next [OpenPublisher].
//
// # Consuming
//
// A [Consumer] reads an nsqd channel (directly or through nsqlookupd) and
// hands out *channel.Message values, so a worker written against
// channel.Receiver runs unchanged against nsqd: Finish, Requeue and Touch
// go to nsqd, and its timeouts and redelivery apply. MaxAttempts and
// DeadLetter mean what they mean for a channel.Channel (zero attempts is
// unlimited), and a message answered after its timeout returns
// channel.ErrNotInFlight, as a Channel's does.
package nsqbridge
