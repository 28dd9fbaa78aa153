module github.com/spillq/spillq

go 1.26

require (
	github.com/golang/snappy v1.0.0
	github.com/nsqio/go-diskqueue v1.1.0
)

require go.uber.org/goleak v1.3.0
