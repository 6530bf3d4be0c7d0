// Package wire is braid's framed binary protocol on TCP, used for bulk data
// between clients and OSDs and, with CBOR bodies (internal/mdsproto), for
// control traffic to the MDS. Requests are pipelined: a connection carries
// many outstanding requests, each tagged with an id, answered in any order.
// A reply too large for a frame is sent as error ErrOverflow, never cut.
//
// Frame format, version 1 (all integers little-endian):
//
//	offset size field
//	0      4    magic    "BRD1" (0x31445242)
//	4      1    version  1
//	5      1    kind     1 request, 2 response
//	6      2    op       operation code (owner package defines them)
//	8      8    id       request id, echoed by the response
//	16     4    metaLen  length of the meta section (<= MaxMetaBytes)
//	20     4    dataLen  length of the data section (<= MaxDataBytes)
//	24     2    status   0 ok, else an error Code (responses only)
//	26     2    reserved must be 0
//	28     4    dataCRC  CRC32C (Castagnoli) of the data section
//	32     4    hdrCRC   CRC32C of bytes 0..31 followed by the meta section
//	36     ...  meta     op-specific header (binary, or CBOR to the MDS); error text when status != 0
//	...    ...  data     bulk payload
//
// A receiver that finds a bad magic, version, kind, length or checksum
// closes the connection: a byte stream cannot be resynchronised.
//
// Handshake: a client's first frame on a connection is a hello (op
// OpHello 0xFFFF, id 0, no data; handshake.go has its layout): the peer id
// and generation fencing needs, the protocol versions the client speaks,
// its features, and room for credentials. The server answers with a
// welcome (id 0): the version both speak, the features both have, and its
// role ("mds", "osd"), before it reads another frame. A server that shares
// no version with the client, a hello of protocol 1 (16 bytes, from before
// the handshake), a hello with credentials the server cannot check, and a
// first frame that is not a hello are answered with ErrProtocol and why,
// and the connection closes (a server older than protocol 2 closes on the
// hello without answering); a client refuses a welcome it cannot speak,
// and the braid client refuses a server whose role is not the MDS it was
// pointed at. A hello anywhere but first closes the connection. A hello of
// a newer generation than the peer's newest closes the peer's older
// connections and waits for their running requests; nothing read from
// them runs afterwards (fence.go says why). Meta and data are separately
// bounded so a hostile peer cannot make a receiver
// allocate more than MaxMetaBytes+MaxDataBytes per frame.
//
// Fenced connections (beyond the papers; Ceph's messenger sessions do
// the same job; fence.go has the mechanism). TCP says nothing across
// connections: a client whose connection broke sends its request again
// on a new one while the first copy may still reach a handler late. The
// simulation found both outcomes once its network could hold a request
// back (simnet.Duplicate): a write landed over a newer one (wrong bytes,
// seed 15), and a file's first write landed after the file was removed
// and its objects deleted, creating an object nobody owns (a leak, seed
// 5). Capabilities do not stop it: they are valid for minutes, and a
// repair's new layout version fences only what came before the repair.
// A pool dials one connection at a time per address. What a client sent
// on its newest connection to a server, after which it sent that server
// nothing (it gave up after its retries), can still run late, also
// behind what the client then did elsewhere: a file's first write,
// given up on, could still land after the file was removed and recreate
// an object nobody owns (OSD tombstones for deleted files would close
// that). The cost is taking one server-wide mutex twice per request:
// small calls from 16 goroutines over one loopback connection ran at
// the same rate fenced and anonymous (BenchmarkSmallCalls, 14.6–17.5 µs
// against 15.8–17.6 µs per call, under load). A server remembers at
// least the last 32,768 peers without connections. Peer ids are random
// but no secret: whoever sees one on the network can fence that peer's
// connections, as, without authentication, they can do anything else.
//
// Fencing does not give exactly-once: a request whose reply was lost
// may have run, and its resend runs again. Every OSD request may run
// more than once (writes of the same bytes, truncations to the same
// size, stages and applies of one txid), and so may an intent's commit
// (sent again, it answers "committed": fencing made the resend always
// run after the first copy, and the simulation's seed 946 then met "not
// found"); namespace mutations are named by client session and sequence
// number and run once (internal/mds/once.go): a resend gets the first
// attempt's answer, not "exists" or "not found". OSD requests are sent
// up to three times on a broken connection.
//
// Bounded connections (beyond the papers; admit.go has the order of
// eviction). Every server bounds its connections in all and per
// address; past a bound a new connection replaces an idle one rather
// than being refused, because refusing new ones is exactly what a flood
// of idle sockets wants, while evicting idle ones costs a real client at
// most a reconnect (which every braid client does on a closed
// connection). A connection has stalled when it sends no hello or
// request within a grace, pauses a frame's head for 100 ms where a real
// client writes it at once, or pauses its data for a second or crawls
// under 64 KiB/s. Slowloris gets hard bounds besides: a hello within
// 10 s of the accept and a frame's head within 10 s of its first byte.
// Server.Admit checks a request's meta before its data is held, within
// the server's in-flight budget. A server full of busy connections
// answers a new one's hello with ErrBusy ("full: N connections, every
// one serving") rather than cutting it wordlessly (not over TLS, where
// the answer would need the handshake the refusal avoids). Out of
// descriptors, an accept loop evicts the same way and goes on; it never
// ends. The S3 gateway does the same for HTTP (internal/s3gw/listen.go).
package wire
