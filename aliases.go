package spillq

import (
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// What a program using a queue touches, named here so that one import is
// enough for it; each is the same type or value as in package channel or
// diskqueue, whose docs are the reference.
type (
	// Message is one delivered message: [channel.Message].
	Message = channel.Message
	// ID identifies a message for its whole life: [channel.ID].
	ID = channel.ID
	// PutOptions are a Put's delay, expiry and key: [channel.PutOptions].
	PutOptions = channel.PutOptions
	// KeyPolicy is what a queue does with message keys: [channel.KeyPolicy].
	KeyPolicy = channel.KeyPolicy
	// Receipt is what Enqueue says of a stored message: [channel.Receipt].
	Receipt = channel.Receipt
	// DuplicateError names the message that holds a refused key:
	// [channel.DuplicateError].
	DuplicateError = channel.DuplicateError
	// Receiver is what a Worker takes messages from: [channel.Receiver].
	Receiver = channel.Receiver
	// DiskOptions configures the disk log (Options.Disk): [diskqueue.Options].
	DiskOptions = diskqueue.Options
)

// The key policies (Options.Keys); see [channel.KeyPolicy].
const (
	KeyNone    = channel.KeyNone
	KeyUnique  = channel.KeyUnique
	KeyReplace = channel.KeyReplace
	KeyDedup   = channel.KeyDedup
	KeySerial  = channel.KeySerial
)

// The errors a queue's callers test for with errors.Is; each is the value
// package channel returns. ErrClosed is also diskqueue's and nsqbridge's:
// one value, whichever layer found the queue closed.
var (
	ErrClosed      = channel.ErrClosed
	ErrDuplicate   = channel.ErrDuplicate
	ErrNotDurable  = channel.ErrNotDurable
	ErrNotInFlight = channel.ErrNotInFlight
	ErrNoMessage   = channel.ErrNoMessage
	ErrMaxAttempts = channel.ErrMaxAttempts
	ErrFailed      = channel.ErrFailed
	ErrExpired     = channel.ErrExpired
	ErrTooLarge    = channel.ErrTooLarge
)
