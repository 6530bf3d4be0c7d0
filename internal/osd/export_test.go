package osd

// SetPackSegmentBytes makes s's pack seal segments past n bytes, so tests
// see segments roll and compact without writing 64 MiB.
func SetPackSegmentBytes(s *Store, n int64) { s.pack.segBytes = n }

// PackSegments is how many segment files s's pack has.
func PackSegments(s *Store) int {
	s.pack.mu.Lock()
	defer s.pack.mu.Unlock()
	return len(s.pack.segs)
}
