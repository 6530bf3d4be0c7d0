package mdsproto

// ObjectLabel is what the MDS writes into each of a file's objects so the
// namespace can be rebuilt from the OSDs alone (Swift's scavenging).
type ObjectLabel struct {
	Ino       uint64   `json:"ino"`
	Path      string   `json:"path"`
	Spec      string   `json:"spec"`
	Groups    int      `json:"groups"`
	OSDs      []uint32 `json:"osds"`
	Version   uint64   `json:"version"`
	Size      int64    `json:"size"`
	Mode      uint32   `json:"mode"`
	MtimeNs   int64    `json:"mtime_ns"`
	LabeledNs int64    `json:"labeled_ns"` // when the MDS wrote it: the newest label wins
	// WrappedKey is a sealed file's data key wrapped under the MDS's key:
	// recover-metadata restores it, and it opens nothing without that key.
	WrappedKey []byte `json:"wrapped_key,omitempty"`
	Uid        uint32 `json:"uid,omitempty"`
	Gid        uint32 `json:"gid,omitempty"`
}

// SealedLabel is an ObjectLabel as the MDS stores it on the OSDs: the
// label's encoding and a MAC over it under a key only the MDS holds, so
// that recover-metadata can tell its labels from ones an OSD made up.
type SealedLabel struct {
	Label []byte `json:"label"`
	MAC   []byte `json:"mac"`
}

type RecoverReq struct {
	Force bool `json:"force"` // merge into a namespace that is not empty
}

type RecoverResp struct {
	Objects  int64    `json:"objects"` // objects scanned
	Files    int64    `json:"files"`   // files restored
	Dirs     int64    `json:"dirs"`    // directories recreated
	Unnamed  int64    `json:"unnamed"` // files put in /lost+found (no label, or their path was taken)
	Problems []string `json:"problems,omitempty"`
}
