package mdsproto

// What status says about single files: those it knows cannot be read,
// and the last things that happened to files' data (StatusResp.LostFiles,
// StatusResp.FileEvents).

// HealthLost is the health of a cluster holding a file that cannot be
// read: more of some stripe's units are lost or corrupt than its parity
// rebuilds. It stays until the file is removed or a repair reads it
// whole again.
const HealthLost = "lost"

// LostFile is a file known to be unreadable, kept by the MDS until the
// file is removed or repaired.
type LostFile struct {
	Ino     uint64 `json:"ino"`
	Path    string `json:"path"` // "" if no name leads to it any more
	Why     string `json:"why"`
	SinceNs int64  `json:"since_ns"` // first found so
	LastNs  int64  `json:"last_ns"`  // last found so
}

// FileEvent is one thing that happened to a file's data, for status's
// list of the last maxFileEvents.
type FileEvent struct {
	Ino  uint64 `json:"ino"`
	Path string `json:"path"`
	What string `json:"what"` // FileLost, FileRepaired, FileRebuilt
	Why  string `json:"why"`
	AtNs int64  `json:"at_ns"`
}

// FileEvent.What values.
const (
	FileLost     = "lost"     // a repair or scrub found the file unreadable
	FileRepaired = "repaired" // a scrub found units wrong (corrupt, lost, short) and rewrote them
	FileRebuilt  = "rebuilt"  // components rebuilt or moved (a lost object, a dead or draining OSD, missed writes)
)
