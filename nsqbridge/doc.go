// Package nsqbridge moves a spillq workload onto a real nsqd cluster when
// one machine is no longer enough, keeping spillq's disk queue as a
// store-and-forward buffer in front of it.
//
// A [Publisher] makes every message durable in a local spillq disk queue
// first, then forwards it to an nsqd topic with github.com/nsqio/go-nsq,
// in order and in batches (MPUB); a local record is removed only after
// nsqd acknowledged it. While nsqd is down, slow or refusing, Publish keeps
// working into the local queue (bounded by its options) and the backlog is
// forwarded when nsqd returns. Delivery to nsqd is at-least-once: if nsqd
// took a batch but the acknowledgement was lost, the batch is sent again.
//
// A [Consumer] reads an nsqd channel (directly or through nsqlookupd) and
// hands out *channel.Message values, so a worker written against
// channel.Receiver runs unchanged against nsqd: Finish, Requeue and Touch
// go to nsqd, and its timeouts and redelivery apply.
package nsqbridge
