package braid

import "github.com/braidfs/braid/internal/client"

// LockEpoch exposes the client's extent-lock session epoch to the tests
// of package braid_test: it changes when the MDS has dropped the session.
func LockEpoch(c *Client) uint64 { return client.LockEpoch(c.c) }

// LockSessionValid reports whether the client's extent locks can be
// trusted now (renewed within the lease).
func LockSessionValid(c *Client) bool { return client.LockSessionValid(c.c) }

// CacheHits counts the lookups and getattrs the client's metadata cache
// answered from memory.
func CacheHits(c *Client) uint64 { return client.CacheHits(c.c) }

// CacheEpoch is the epoch the client's metadata cache holds (0: none); it
// changes when the MDS ends the cache's registrations (an eviction).
func CacheEpoch(c *Client) uint64 { return client.CacheEpoch(c.c) }

// ClaimedDirs counts the directories the client holds write-back claims
// on, and the ops it acknowledged that the MDS has not applied yet.
func ClaimedDirs(c *Client) (dirs, queued int) { return client.ClaimedDirs(c.c) }

// ClaimHeld reports whether the client holds a write-back claim on dir.
func ClaimHeld(c *Client, dir uint64) bool { return client.ClaimHeld(c.c, dir) }

// CrashClient stops the client as a process death would: its cache and
// write-back stop at once, nothing is sent or released.
func CrashClient(c *Client) { client.CrashClient(c.c) }
