package godq_test

import (
	"fmt"
	"os"

	"github.com/spillq/spillq/diskqueue/godq"
)

func ExampleNewCompat() {
	dir, _ := os.MkdirTemp("", "spillq-example")
	defer os.RemoveAll(dir)

	// The one-line switch from github.com/nsqio/go-diskqueue's New.
	dq := godq.NewCompat("topic", dir, 100<<20, 0, 1<<20, 2500, 0, nil)
	defer dq.Close()
	dq.Put([]byte("hello"))
	fmt.Printf("%s, depth now %d\n", <-dq.ReadChan(), dq.Depth())
	// Output: hello, depth now 0
}
