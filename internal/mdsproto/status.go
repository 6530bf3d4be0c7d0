package mdsproto

// What OpStatus answers: the cluster map, health, repair progress and
// the metadata service (and damage.go: lost files, file events).

type OSDStatus struct {
	ID         uint32 `json:"id"`
	Addr       string `json:"addr"`
	State      string `json:"state"`              // StateUp, StateDown or StateOut
	Draining   bool   `json:"draining,omitempty"` // being emptied by braid osd drain
	Components int64  `json:"components"`         // file components placed on it
	// LayoutBytes estimates the data of the components placed on it, from
	// the layouts (refreshed in the background): what rebalancing evens out.
	LayoutBytes   int64 `json:"layout_bytes"`
	CapacityBytes int64 `json:"capacity_bytes"`
	UsedBytes     int64 `json:"used_bytes"`
	FreeBytes     int64 `json:"free_bytes"`
	Pid           int   `json:"pid,omitempty"`
	LastSeenNs    int64 `json:"last_seen_ns"`
	// Disk, DiskBytes and DiskFreeBytes are its heartbeat's: OSDs with
	// the same Disk share one file system.
	Disk          string `json:"disk,omitempty"`
	DiskBytes     int64  `json:"disk_bytes,omitempty"`
	DiskFreeBytes int64  `json:"disk_free_bytes,omitempty"`
	// Host and Rack are its failure domains, as it said ("": not said).
	Host string `json:"host,omitempty"`
	Rack string `json:"rack,omitempty"`
}

type StatusResp struct {
	ClusterID     string      `json:"cluster_id"`
	DefaultLayout string      `json:"default_layout"`
	OSDs          []OSDStatus `json:"osds"`
	Files         int64       `json:"files"`
	Dirs          int64       `json:"dirs"`
	LogicalBytes  int64       `json:"logical_bytes"`
	CapacityBytes int64       `json:"capacity_bytes"`
	UsedBytes     int64       `json:"used_bytes"`
	// Health is HealthOK when every file has its full redundancy,
	// HealthDegraded when some lack part of it, and HealthLost when some
	// file cannot be read; Problems says what is missing.
	Health string `json:"health"`
	// Writers counts writer leases (files open for writing); Intents the
	// staged partial-stripe writes not yet finished.
	Writers int64 `json:"writers"`
	Intents int64 `json:"intents"`
	// PendingDelete is the space removed and replaced files still hold:
	// their objects are deleted once every capability that could reach
	// them has expired (NextNs: the earliest such time).
	PendingDelete PendingDelete `json:"pending_delete"`
	// LabelsPending counts files whose object labels (for scavenging)
	// are still to be written.
	LabelsPending int64    `json:"labels_pending"`
	Problems      []string `json:"problems,omitempty"`
	// LostFiles lists files known to be unreadable (at most
	// MaxLostListed; LostCount counts them all), FileEvents the last
	// things that happened to files' data (damage.go).
	LostFiles  []LostFile     `json:"lost_files,omitempty"`
	LostCount  int64          `json:"lost_count,omitempty"`
	FileEvents []FileEvent    `json:"file_events,omitempty"`
	Repair     RepairProgress `json:"repair"`
	// Meta is the metadata service itself: its MDS processes and the
	// engine holding the namespace.
	Meta MetaStatus `json:"meta"`
}

// MetaStatus describes the metadata service.
type MetaStatus struct {
	Engine string `json:"engine"` // "embedded" (Pebble in the MDS's directory) or "etcd"
	// MDS lists the MDS processes, the active first.
	MDS []MDSProcess `json:"mds"`
	// Members are the etcd members, with Engine "etcd".
	Members []EngineMember `json:"members,omitempty"`
	// Requests counts the active MDS's requests to etcd since it
	// started (bench divides them by operations).
	Requests EngineRequests `json:"requests"`
	// Routing is the table of which MDS process serves each slot (the
	// low 8 bits of an inode number), as the answering process holds it.
	Routing *Routing `json:"routing,omitempty"`
}

// Routing maps slots to the MDS processes serving them.
type Routing struct {
	// Multi: several processes are active (clients route by the table);
	// else one serves all and clients follow the address list.
	Multi   bool          `json:"multi,omitempty"`
	Epoch   uint64        `json:"epoch"` // raised by every change
	Servers []RouteServer `json:"servers"`
	// Owners has one entry per slot: the index in Servers of its server.
	Owners []uint16 `json:"owners"`
}

// RouteServer is one MDS process of the routing table.
type RouteServer struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	Slots int    `json:"slots"` // how many slots it serves
}

// EngineRequests counts requests to the engine.
type EngineRequests struct {
	Reads     int64 `json:"reads"`
	Commits   int64 `json:"commits"`
	Conflicts int64 `json:"conflicts"`
}

// MDSProcess is one MDS process.
type MDSProcess struct {
	Name      string `json:"name"`
	Addr      string `json:"addr"`
	Pid       int    `json:"pid"`
	Host      string `json:"host,omitempty"`
	Role      string `json:"role"` // "active" or "standby"
	StartedNs int64  `json:"started_ns,omitempty"`
}

// EngineMember is one etcd member's health.
type EngineMember struct {
	Endpoint  string `json:"endpoint"`
	Name      string `json:"name,omitempty"`
	Leader    bool   `json:"leader"` // leads Raft
	DBBytes   int64  `json:"db_bytes"`
	RaftTerm  uint64 `json:"raft_term"`
	RaftIndex uint64 `json:"raft_index"`
	Error     string `json:"error,omitempty"`
}

// Cluster health values.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
)

// RepairProgress is the state of the background repair (rebuild, catch-up,
// drain, rebalance, scrub).
type RepairProgress struct {
	FilesLeft     int64   `json:"files_left"`       // files that need repair now
	BytesLeft     int64   `json:"bytes_left"`       // bytes of those files' components to write
	Active        int     `json:"active"`           // files being worked on right now: the three below
	ActiveRebuild int     `json:"active_rebuild"`   // being rebuilt, caught up or moved off a draining OSD
	ActiveScrub   int     `json:"active_scrub"`     // being scrubbed
	ActiveBalance int     `json:"active_balance"`   // components being moved to even out OSDs
	FilesDone     int64   `json:"files_done"`       // since the MDS started
	BytesDone     int64   `json:"bytes_done"`       // since the MDS started
	RateBytesPerS float64 `json:"rate_bytes_per_s"` // recent repair write rate
	ETASeconds    float64 `json:"eta_seconds"`      // BytesLeft at that rate; 0 when idle or unknown
	Unrepairable  int64   `json:"unrepairable"`     // files with fewer sources than their layout needs
	ScrubbedFiles int64   `json:"scrubbed_files"`   // files verified by scrub since the MDS started
	ScrubRepaired int64   `json:"scrub_repaired"`   // units scrub found wrong and rewrote
	// ScrubBytes counts the unit bytes scrubs read since the MDS started
	// (holes of sparse files are not read), ScrubRateBytesPerS the rate
	// of the last rateWindow.
	ScrubBytes         int64   `json:"scrub_bytes"`
	ScrubRateBytesPerS float64 `json:"scrub_rate_bytes_per_s"`
	LastScrubEndNs     int64   `json:"last_scrub_end_ns"`
	ScrubQueued        int64   `json:"scrub_queued"` // files waiting for scrub
	// ScrubTaken counts files taken off the scrub queue whatever became of
	// them (scrubbed, failed, repaired instead, removed), ScrubFailed
	// those whose scrub failed: a scrub of a tree is done when every file
	// it queued was taken and none is active.
	ScrubTaken   int64    `json:"scrub_taken"`
	ScrubFailed  int64    `json:"scrub_failed"`
	Rebalanced   int64    `json:"rebalanced"` // components moved to even out OSDs
	Balancing    bool     `json:"balancing"`  // OSDs differ by more than the slack: moves continue
	RecentErrors []string `json:"recent_errors,omitempty"`
	// BalanceBytes counts bytes moved to even out OSDs (not repairs:
	// FilesDone counts those); RecentRepairs lists the last repairs and
	// moves with why each was needed.
	BalanceBytes  int64    `json:"balance_bytes"`
	RecentRepairs []string `json:"recent_repairs,omitempty"`
}

// PendingDelete sums the objects awaiting deletion.
type PendingDelete struct {
	Objects int64 `json:"objects"`
	Bytes   int64 `json:"bytes"`
	NextNs  int64 `json:"next_ns,omitempty"`
	LastNs  int64 `json:"last_ns,omitempty"` // when the last of them may go
	// OpenBytes is held by removed files still open somewhere: freed
	// (then queued as above) at their last close.
	OpenBytes int64 `json:"open_bytes"`
}
