//go:build !invariants && !race

package invariants

// Enabled: this build checks invariants after every decision.
const Enabled = false
