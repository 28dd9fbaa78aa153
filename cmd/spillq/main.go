// Command spillq inspects and repairs spillq queue directories.
//
//	spillq stat    DIR                    cursors, depth, segments, bytes, retained range, .bad files
//	spillq dump    [flags] DIR            records from a seq or a time, as text, hex or JSON lines
//	spillq get     [flags] DIR SEQ        one record by sequence number
//	spillq verify  DIR                    check every CRC, index entry and cursor; exit 1 on problems
//	spillq repair  DIR                    cut a torn tail, rebuild indexes, set damage aside
//	spillq tail    [flags] DIR            follow records as they are written
//	spillq put     [flags] DIR            store each line of stdin as a record
//	spillq drain   [flags] DIR            print records and acknowledge them
//	spillq import-nsqd -name N -from D DIR  copy a go-diskqueue/nsqd queue into DIR
//
// stat, dump, get, verify and tail only read, and work while a service has
// the queue open. repair, put, drain and import-nsqd change the queue and
// take its lock: stop the service first. With -channel, records are read
// and written as channel messages (what spillq.Open stores) rather than
// raw bodies.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// errProblems is returned by a command that ran but found problems; it
// exits with status 1 and prints nothing more.
var errProblems = errors.New("problems found")

type command struct {
	name, usage string
	run         func(args []string, stdin io.Reader, stdout io.Writer) error
}

var commands = []command{
	{"stat", "DIR", cmdStat},
	{"dump", "[-from SEQ | -since TIME] [-limit N] [-format text|hex|json] [-channel] DIR", cmdDump},
	{"get", "[-format text|hex|json] [-channel] DIR SEQ", cmdGet},
	{"verify", "DIR", cmdVerify},
	{"repair", "DIR", cmdRepair},
	{"tail", "[-from SEQ] [-count N] [-format text|hex|json] [-channel] DIR", cmdTail},
	{"put", "[-channel] DIR < lines", cmdPut},
	{"drain", "[-limit N] [-format text|hex|json] [-channel] DIR", cmdDrain},
	{"import-nsqd", "-name NAME -from NSQD_DATA_PATH [-channel] DIR", cmdImportNSQD},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: spillq COMMAND [flags] DIR ...")
	for _, c := range commands {
		fmt.Fprintf(w, "  spillq %-11s %s\n", c.name, c.usage)
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command and returns the exit status: 0 success, 1 an
// error or problems found, 2 bad usage.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdin, stdout)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "spillq %s: %v\nusage: spillq %s %s\n", c.name, err, c.name, c.usage)
			return 2
		case errors.Is(err, errProblems):
			return 1
		default:
			fmt.Fprintf(stderr, "spillq %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "spillq: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}
