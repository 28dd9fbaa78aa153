//go:build tools

package tools

import (
	_ "github.com/nsqio/nsq/apps/nsqadmin"
	_ "github.com/nsqio/nsq/apps/nsqd"
	_ "github.com/nsqio/nsq/apps/nsqlookupd"
)
