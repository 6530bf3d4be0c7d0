package mds

import (
	"testing"
	"time"
)

func TestLeaseTable(t *testing.T) {
	var l leaseTable
	now := time.Unix(1000, 0)
	if _, err := l.renew(7, 1, true, now, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.renew(7, 2, false, now, time.Second, false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.renew(7, 2, false, now, 3*time.Second, false); err != nil || l.n != 2 {
		t.Fatalf("renewal counted as a new lease: n=%d err %v", l.n, err)
	}
	if !l.held(7, now.Add(500*time.Millisecond)) || l.writers() != 1 {
		t.Fatal("leases not held")
	}
	// The writer's lease runs out (its client died): the file is named.
	if dead := l.expireWriters(now.Add(2 * time.Second)); len(dead) != 1 || dead[0] != 7 {
		t.Fatalf("expired writers %v, want [7]", dead)
	}
	if !l.held(7, now.Add(2*time.Second)) || l.n != 1 {
		t.Fatalf("the reader's longer lease should remain: n=%d", l.n)
	}
	if _, err := l.renew(7, 2, false, now, 0, true); err != nil || l.n != 0 || l.held(7, now) {
		t.Fatalf("release: n=%d err %v", l.n, err)
	}
	l.n = maxLeases // full: new leases are refused, renewals of held ones not
	if _, err := l.renew(8, 9, false, now, time.Second, false); err == nil {
		t.Fatal("a lease past the bound was granted")
	}
}
