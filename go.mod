module github.com/spillq/spillq

// The oldest release that builds and tests this module: the packages need
// Go 1.24 (slog.DiscardHandler), their tests 1.25 (testing/synctest,
// sync.WaitGroup.Go); go vet's stdversion check holds code to this line.
// Dependencies are held at versions whose own go lines are no newer, so
// that this line, not theirs, is what a service importing spillq inherits.
go 1.25.0

require (
	github.com/golang/snappy v1.0.0
	github.com/nsqio/go-diskqueue v1.1.0
	github.com/nsqio/go-nsq v1.1.0
	github.com/prometheus/client_golang v1.23.2
	github.com/prometheus/client_model v0.6.3
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.35.0
	golang.org/x/term v0.34.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.17.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
