// Package invariants says whether this build checks invariants as it
// runs (Pebble's internal/invariants): the cores under internal/core
// check their state after every decision in builds with the race
// detector or the `invariants` tag, which the test suite uses, and
// skip the cost in release builds. A broken invariant panics with what
// broke: it is an assertion, never an expected error.
package invariants

// Must panics if err (a core's check() of its state) says an invariant
// broke.
func Must(err error) {
	if err != nil {
		panic("invariant broken: " + err.Error())
	}
}
