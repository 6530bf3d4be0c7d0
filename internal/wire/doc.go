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
package wire
