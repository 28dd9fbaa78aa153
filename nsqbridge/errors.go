package nsqbridge

import (
	"errors"

	"github.com/spillq/spillq/internal/closed"
)

var (
	// ErrInvalidOptions is returned by OpenPublisher and NewConsumer for a
	// missing or out-of-range option.
	ErrInvalidOptions = errors.New("nsqbridge: invalid options")

	// ErrClosed is returned by a Publisher's or Consumer's methods after
	// Close. It is the same value as channel.ErrClosed,
	// diskqueue.ErrClosed and spillq.ErrClosed.
	ErrClosed = closed.Err
)

// Errors Publish returns for a message nsqd would refuse. The message is
// not stored.
var (
	// ErrEmptyMessage: nsqd refuses an empty body.
	ErrEmptyMessage = errors.New("nsqbridge: empty message body")
	// ErrMessageTooLarge: the body is over PublisherOptions.MaxMsgSize.
	ErrMessageTooLarge = errors.New("nsqbridge: message body too large")
	// ErrInvalidTopic: not a valid nsqd topic name (1 to 64 characters of
	// [.a-zA-Z0-9_-], optionally ending in "#ephemeral").
	ErrInvalidTopic = errors.New("nsqbridge: invalid topic name")
	// ErrInvalidDelay: a deferred publish's delay is negative or over
	// PublisherOptions.MaxDelay.
	ErrInvalidDelay = errors.New("nsqbridge: invalid delay")
)

// Reasons a Publisher hands a message to its dead-letter handler.
var (
	// ErrRefused wraps nsqd's own error (such as "E_BAD_MESSAGE PUB
	// message too big 2000 > 1024") for a message nsqd refused to take
	// even on its own, so sending it again cannot succeed.
	ErrRefused = errors.New("nsqbridge: refused by nsqd")
	// ErrBadEnvelope reports a local record that is not a message a
	// Publisher wrote (see FORMAT.md, "Publisher envelope"), such as one
	// left in the directory by a version before the envelope.
	ErrBadEnvelope = errors.New("nsqbridge: local record is not a publisher message")
)
