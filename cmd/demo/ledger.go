package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ledger is the demo's own record of what it produced and finished, kept
// next to the queue so a run after a crash can say what was lost. It is
// flushed a few times a second, so it may trail the queue by a moment.
type ledger struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// pastRun is what earlier runs recorded.
type pastRun struct {
	produced    map[int64]bool // produced and not finished
	finished    map[int64]bool
	maxProduced int64
	count       int // produced in all
}

func openLedger(path string) (*ledger, pastRun, error) {
	past := pastRun{produced: map[int64]bool{}, finished: map[int64]bool{}, maxProduced: -1}
	if b, err := os.ReadFile(path); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) < 3 {
				continue
			}
			n, err := strconv.ParseInt(line[2:], 10, 64)
			if err != nil {
				continue // a line cut by a crash
			}
			switch line[0] {
			case 'p':
				past.produced[n] = true
				past.count++
				past.maxProduced = max(past.maxProduced, n)
			case 'f':
				past.finished[n] = true
			}
		}
	}
	for n := range past.finished {
		delete(past.produced, n)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, past, fmt.Errorf("ledger: %w", err)
	}
	l := &ledger{f: f, w: bufio.NewWriterSize(f, 64<<10)}
	return l, past, nil
}

func (l *ledger) record(kind byte, n int64) {
	l.mu.Lock()
	l.w.WriteByte(kind)
	l.w.WriteByte(' ')
	l.w.WriteString(strconv.FormatInt(n, 10))
	l.w.WriteByte('\n')
	l.mu.Unlock()
}

func (l *ledger) flush() {
	l.mu.Lock()
	l.w.Flush()
	l.mu.Unlock()
}

// crash flushes the ledger and kills the process (SIGKILL on Unix,
// TerminateProcess on Windows) while holding the ledger, so nothing is
// recorded, or finished, after the flush.
func (l *ledger) crash() error {
	l.mu.Lock()
	l.w.Flush()
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		l.mu.Unlock()
		return fmt.Errorf("crash: kill self: %w", err)
	}
	select {} // the signal is on its way; never let go of the ledger
}

func (l *ledger) close() {
	l.flush()
	l.f.Close()
}
