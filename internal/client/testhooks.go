package client

import "time"

// Views into a client's state for the tests of the public package
// (export_test.go there): they are not part of its API.

// LockEpoch exposes the client's extent-lock session epoch to the tests
// of the public package: it changes when the MDS has dropped the session.
func LockEpoch(c *Client) uint64 { return c.locks.sessionEpoch() }

// LockSessionValid reports whether the client's extent locks can be
// trusted now (renewed within the lease).
func LockSessionValid(c *Client) bool { return c.locks.valid(time.Now()) }

// CacheHits counts the lookups and getattrs the client's metadata cache
// answered from memory.
func CacheHits(c *Client) uint64 {
	if m := c.metaCache(); m != nil {
		return m.hits.Load()
	}
	return 0
}

// CacheEpoch is the epoch the client's metadata cache holds (0: none); it
// changes when the MDS ends the cache's registrations (an eviction).
func CacheEpoch(c *Client) uint64 {
	if m := c.metaCache(); m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.epoch
	}
	return 0
}

// ClaimedDirs counts the directories the client holds write-back claims
// on, and the ops it acknowledged that the MDS has not applied yet.
func ClaimedDirs(c *Client) (dirs, queued int) {
	w := c.wbIfAny()
	if w == nil {
		return 0, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.dirs), w.queued
}

// ClaimHeld reports whether the client holds a write-back claim on dir.
func ClaimHeld(c *Client, dir uint64) bool {
	w := c.wbIfAny()
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dirs[dir] != nil
}

// CrashClient stops the client as a process death would: its cache and
// write-back stop at once, nothing is sent or released.
func CrashClient(c *Client) { c.endLife() }
