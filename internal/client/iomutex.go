package client

import "sync"

// ioMutex is a mutex meant to be held across I/O: a handle's writes and
// syncs hold its lock while they wait for OSDs and the MDS. It is a
// one-slot channel, so its waiters wait as on any channel. That matters
// to the simulation: Go's testing/synctest counts a goroutine waiting on
// a sync.Mutex as running, so a bubble where the holder waits for
// simulated time (a retry's backoff, a slow OSD's reply) while another
// goroutine waits for the lock (a lock recall) could never move its clock
// on, and would hang; waiting on a channel, both wait durably and time
// goes on. The zero value is unlocked.
type ioMutex struct {
	once sync.Once
	ch   chan struct{}
}

func (m *ioMutex) slot() chan struct{} {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	return m.ch
}

// Lock waits until the mutex is free and takes it.
func (m *ioMutex) Lock() { m.slot() <- struct{}{} }

// Unlock frees the mutex; it must be held.
func (m *ioMutex) Unlock() {
	select {
	case <-m.slot():
	default:
		panic("braid: unlock of an unlocked ioMutex")
	}
}
