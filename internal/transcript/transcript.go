// Package transcript reads the arguments of datadriven transcript lines
// (key=value) for the cores' tests: one place that knows how a value is
// spelled, so each test's switch says only what its commands do.
package transcript

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// Str is key's value, or "" when the line does not name it.
func Str(t testing.TB, d *datadriven.TestData, key string) string {
	t.Helper()
	var v string
	if d.HasArg(key) {
		d.ScanArgs(t, key, &v)
	}
	return v
}

// Int is key's value as an integer; a missing or malformed one fails
// the test.
func Int(t testing.TB, d *datadriven.TestData, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(Str(t, d, key), 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return n
}

// Dur is key's value as a duration (Go's syntax: 1s, 500ms).
func Dur(t testing.TB, d *datadriven.TestData, key string) time.Duration {
	t.Helper()
	x, err := time.ParseDuration(Str(t, d, key))
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	return x
}

// Ints is key's value as a comma-separated list of integers (none when
// the line does not name it).
func Ints(t testing.TB, d *datadriven.TestData, key string) []int64 {
	t.Helper()
	var out []int64
	for _, f := range strings.Split(Str(t, d, key), ",") {
		if f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			d.Fatalf(t, "%s: %v", key, err)
		}
		out = append(out, n)
	}
	return out
}
