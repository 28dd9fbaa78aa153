// Command spillq inspects and repairs spillq queue directories.
//
//	spillq stat    DIR          cursors, depth, lag, segments, .bad files
//	spillq dump    DIR          records from a seq or a time, as text, hex or JSON lines
//	spillq get     DIR SEQ      one record by sequence number
//	spillq verify  DIR          check every CRC, index entry and cursor; exit 1 on problems
//	spillq tail    DIR          follow records as they are written
//	spillq repair  DIR          cut a torn tail, rebuild indexes, set damage aside, acknowledge it
//	spillq put     DIR          store each line of stdin as a record
//	spillq drain   DIR          print records and acknowledge them
//	spillq key     DIR KEY      the records a message key still has in the log, oldest first, acknowledged or pending
//	spillq cursor  create|delete|reset NAME DIR   manage a log's named cursors
//	spillq channel create|delete|reset NAME DIR   manage a topic's channels
//	spillq dead    list|redrive|purge DIR        a queue's (or, -channel, a topic channel's) dead letters
//	spillq import-nsqd DIR      copy the unread messages of an nsqd or go-diskqueue queue into DIR
//
// stat, dump, get, verify, tail, key and dead list only read, and work while a
// service has the queue open. repair, put, drain, cursor, channel, dead
// redrive and purge, and import-nsqd change the queue and take its lock:
// stop the service first. Every command
// refuses a directory that is not a queue; put and import-nsqd create one
// only with -create.
//
// A topic's directory (spillq.OpenTopic; it has a channels/ subdirectory)
// is one log read by named channels: stat shows each channel's depth, lag
// and deferred messages, and in its header the deepest channel's depth and
// the slowest one's lag (the log itself has no cursor, so its records on
// disk are retained, not pending), and channel creates, deletes and moves
// them.
// put, drain and import-nsqd, which work through a queue's own cursor,
// refuse one. verify and repair check the topic's log; each channel's
// timer store is a queue of its own, DIR/channels/NAME.
//
// Records a channel wrote (what spillq.Open stores) are recognised and
// decoded; -raw shows the stored bytes instead. Flags may come before or
// after the positional arguments. 'spillq COMMAND -h' lists a command's
// flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// errProblems is returned by a command that ran but found problems, which
// it has already reported; the tool exits with status 1 and prints nothing
// more.
var errProblems = errors.New("problems found")

// errHelp is returned when the user asked for help, which has been printed.
var errHelp = errors.New("help requested")

// env is what a command reads from and writes to.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	run     func(e *env, args []string) error
}

// commands is filled in by init: the commands' -h output reads the table,
// which would otherwise be an initialization cycle.
var commands []command

func init() {
	commands = []command{
		{"stat", "DIR", "cursors, depth, lag, segments, .bad files", cmdStat},
		{"dump", "DIR", "records from a seq or a time, as text, hex or JSON lines", cmdDump},
		{"get", "DIR SEQ", "one record by sequence number", cmdGet},
		{"key", "DIR KEY", "the records a message key still has in the log, oldest first, the newest last, each acknowledged or pending (on a queue)", cmdKey},
		{"verify", "DIR", "check every CRC, index entry and cursor; exit 1 on problems", cmdVerify},
		{"tail", "DIR", "follow records as they are written", cmdTail},
		{"repair", "DIR", "cut a torn tail, rebuild indexes, set damage aside, acknowledge it", cmdRepair},
		{"put", "DIR", "store each line of stdin as a record", cmdPut},
		{"drain", "DIR", "print records and acknowledge each once written to stdout (a reader that stops early, such as head, loses what the pipe held: use -limit)", cmdDrain},
		{"cursor", "create|delete|reset NAME DIR", "manage a log's named cursors (consumer groups): create one at -from/-since, delete one, or move one", cmdCursor},
		{"channel", "create|delete|reset NAME DIR", "manage a topic's channels as cursor does; delete also removes the timer store, reset keeps it", cmdChannel},
		{"dead", "list|redrive|purge DIR", "a queue's dead letters (a topic channel's with -channel): list them (only reads, beside a service), redrive them (back in the queue with their ID and key, attempts reset; the queue's key policy is not checked) or purge them; -id, -since, -until choose which", cmdDead},
		{"import-nsqd", "DIR", "copy the unread messages of an nsqd or go-diskqueue queue into DIR", cmdImportNSQD},
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: spillq COMMAND [flags] DIR ...

Commands that only read (they run beside a service that has the queue open):
`)
	for _, c := range commands {
		if c.name == "repair" {
			fmt.Fprint(w, "\nCommands that change the queue (they take its lock: stop the service first):\n")
		}
		fmt.Fprintf(w, "  %-24s %s\n", c.name+" "+c.args, c.summary)
	}
	fmt.Fprint(w, `
Flags may come before or after DIR. 'spillq COMMAND -h' lists a command's
flags. Exit status: 0 success, 1 an error or problems found, 2 bad usage.
`)
}

func main() {
	os.Exit(run(os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}))
}

// run executes one command and returns the exit status: 0 success, 1 an
// error or problems found, 2 bad usage.
func run(args []string, e *env) int {
	if len(args) == 0 {
		usage(e.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			// spillq help CMD is spillq CMD -h.
			return run([]string{args[1], "-h"}, e)
		}
		usage(e.stdout)
		return 0
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		err := c.run(e, args[1:])
		switch {
		case err == nil, errors.Is(err, errHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(e.stderr, "spillq %s: %s\n", c.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
			fmt.Fprintf(e.stderr, "usage: spillq %s [flags] %s ('spillq %s -h' lists the flags)\n", c.name, c.args, c.name)
			return 2
		case errors.Is(err, errProblems):
			return 1
		default:
			fmt.Fprintf(e.stderr, "spillq %s: %s\n", c.name, describe(err))
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "spillq: unknown command %q\n\n", name)
	usage(e.stderr)
	return 2
}

// newFlags returns the flag set of command name; parseArgs reports its
// errors.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseArgs parses flags anywhere among args (flag's own Parse stops at the
// first positional argument, so "spillq get DIR 17 -raw" would lose -raw)
// and returns the positional arguments, which must number n. Everything
// after "--" is positional. -h prints the command's usage and flags to
// stdout and returns errHelp.
func parseArgs(e *env, fs *flag.FlagSet, args []string, n int) ([]string, error) {
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(e.stdout, fs)
			return nil, errHelp
		}
		if err != nil {
			return nil, usageErr("%v", err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) != n {
		return nil, usageErr("want %d argument(s), got %d", n, len(pos))
	}
	return pos, nil
}

func commandUsage(w io.Writer, fs *flag.FlagSet) {
	for _, c := range commands {
		if c.name == fs.Name() {
			fmt.Fprintf(w, "usage: spillq %s [flags] %s\n\n%s.\n", c.name, c.args, upperFirst(c.summary))
		}
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if !has {
		fmt.Fprintln(w, "\nNo flags.")
		return
	}
	fmt.Fprintln(w, "\nFlags (before or after the arguments):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

var errUsage = errors.New("bad usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// describe renders an error for the operator. The tool's own "spillq CMD:"
// prefix already says where the message comes from, and the layers below
// each add theirs ("diskqueue: open /d: diskqueue: directory is locked"),
// so the package prefixes are dropped wherever they occur.
// A wrapped sentinel can also show up twice ("corrupt data: segment …:
// corrupt data: checksum mismatch"); only its first mention stays.
func describe(err error) string {
	s := err.Error()
	for _, p := range []string{"spillq: ", "diskqueue: ", "channel: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	for _, sentinel := range []error{diskqueue.ErrCorrupt, diskqueue.ErrNotFound, diskqueue.ErrLocked, channel.ErrBadEnvelope} {
		m := strings.TrimPrefix(sentinel.Error(), "diskqueue: ")
		m = strings.TrimPrefix(m, "channel: ") + ": "
		if i := strings.Index(s, m); i >= 0 {
			s = s[:i+len(m)] + strings.ReplaceAll(s[i+len(m):], m, "")
		}
	}
	return s
}
