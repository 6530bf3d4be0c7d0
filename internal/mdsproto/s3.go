package mdsproto

// S3 access keys, kept by the MDS. The secret leaves the MDS once, in the
// answer to S3UserAdd; gateways ask for SigV4 signing keys instead, which
// are valid for one day, region and service.

type S3UserReq struct {
	Name string `json:"name"`
	// Uid and Gid are the identity whose POSIX permissions the user's
	// objects are checked with; nil Uid picks the next free one of the
	// S3 users' range (FirstS3Uid up), nil Gid the uid.
	Uid    *uint32  `json:"uid,omitempty"`
	Gid    *uint32  `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"` // supplementary groups
	Admin  bool     `json:"admin,omitempty"`  // every bucket, as root
}

// FirstS3Uid is the first uid given to S3 users made without one: far
// above the system's and the usual login users' ranges.
const FirstS3Uid = 200_000

// MaxS3UserGroups bounds an S3 user's supplementary groups.
const MaxS3UserGroups = 64

type S3User struct {
	Name      string   `json:"name"`
	AccessKey string   `json:"access_key"`
	SecretKey string   `json:"secret_key,omitempty"` // only in S3UserAdd's answer
	CreatedNs int64    `json:"created_ns"`
	Uid       uint32   `json:"uid"`
	Gid       uint32   `json:"gid"`
	Groups    []uint32 `json:"groups,omitempty"`
	Admin     bool     `json:"admin,omitempty"`
}

type S3UserListResp struct {
	Users []S3User `json:"users"`
}

type S3SigningKeyReq struct {
	AccessKey string `json:"access_key"`
	Date      string `json:"date"` // yyyymmdd
	Region    string `json:"region"`
	Service   string `json:"service"`
}

type S3SigningKeyResp struct {
	Name string `json:"name"`
	Key  []byte `json:"key"`
	// Who the key's user is: the gateway acts as this identity.
	Uid    uint32   `json:"uid"`
	Gid    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Admin  bool     `json:"admin,omitempty"`
}
