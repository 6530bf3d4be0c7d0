package osd

import "sync"

// Writes taken without the sync flag (osdproto.FlagSync) are durable
// once something syncs them: their writer's Sync of the object, or
// SyncAll (osdproto.OpSyncAll), which a client sends each OSD once for
// every file it closed under the async policy. Packed objects share the
// pack's log, so one group fsync covers all of them; objects in files
// of their own are listed here while they hold writes not synced, so
// SyncAll finds them. The list is bounded: past maxUnsyncedFiles a write
// without the sync flag syncs its object at once.

// maxUnsyncedFiles bounds the objects in files of their own listed as
// holding writes not synced.
const maxUnsyncedFiles = 4096

// unsyncedFiles lists objects in files of their own written since their
// last sync.
type unsyncedFiles struct {
	mu   sync.Mutex
	keys map[ObjKey]struct{}
}

// noteUnsynced lists object o (held, in files of its own) as holding
// writes not synced; false if the list is full: the caller syncs o.
func (s *Store) noteUnsynced(o *object) bool {
	u := &s.unsynced
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.keys[o.key]; ok {
		return true
	}
	if len(u.keys) >= maxUnsyncedFiles {
		return false
	}
	if u.keys == nil {
		u.keys = map[ObjKey]struct{}{}
	}
	u.keys[o.key] = struct{}{}
	return true
}

// notedSynced takes k off the list (synced, or gone).
func (s *Store) notedSynced(k ObjKey) {
	u := &s.unsynced
	u.mu.Lock()
	delete(u.keys, k)
	u.mu.Unlock()
}

// afterWrite is how a write, truncation or apply of held object o ends:
// synced if sync is set (or the list of unsynced objects is full),
// listed for SyncAll otherwise.
func (s *Store) afterWrite(o *object, sync bool) error {
	if sync || (!o.packed && !s.noteUnsynced(o)) {
		return s.syncLocked(o)
	}
	return nil
}

// SyncAll makes every write taken so far durable: the objects in files
// of their own written since their last sync, then the pack's log.
func (s *Store) SyncAll() error {
	u := &s.unsynced
	u.mu.Lock()
	keys := make([]ObjKey, 0, len(u.keys))
	for k := range u.keys {
		keys = append(keys, k)
	}
	u.mu.Unlock()
	for _, k := range keys {
		if err := s.syncIfHeld(k); err != nil {
			return err
		}
	}
	return s.pack.syncAll()
}

// syncIfHeld syncs object k if it is still in files of its own; a
// missing, deleted or packed one is taken off the list.
func (s *Store) syncIfHeld(k ObjKey) error {
	o, err := s.acquire(k, false, 0)
	if err != nil {
		return s.ioError(err)
	}
	if o == nil {
		s.notedSynced(k)
		return nil
	}
	defer s.release(o)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deleted || o.packed {
		s.notedSynced(k)
		return nil
	}
	return s.syncLocked(o)
}

// syncAll makes every append so far durable (one group fsync, shared
// with any other waiting).
func (p *pack) syncAll() error {
	p.mu.Lock()
	seq := p.written
	p.mu.Unlock()
	return p.waitDurable(seq)
}
