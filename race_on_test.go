//go:build race

package spillq_test

// raceEnabled says the tests run under the race detector, whose shadow
// memory and slower code change what memory and time figures mean.
const raceEnabled = true
