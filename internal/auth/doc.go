// Package auth is who may talk to the MDS: a cluster certificate
// authority, the credentials it issues, and mutual TLS on the MDS's
// port (below: why mutual TLS).
//
// A principal is named by its certificate, signed by the cluster CA:
//
//	Subject CommonName           the principal's name ("admin", "osd3", "mount@host")
//	Subject OrganizationalUnit   its role: mds, osd, healer, gateway, admin, client
//	URI SANs                     identities it may assert in requests:
//	                             braid:uid:N, braid:gid:N (any number of each),
//	                             braid:id:any (any uid and gid, root included)
//
// A credential file (0600) is PEM: the principal's certificate, its
// private key (PKCS#8, ECDSA P-256) and the CA's certificate, in that
// order. The CA's own key lives next to its certificate in the CA
// directory (ca.key, 0600) and is needed only to issue credentials.
//
// Version: certificates carry the URI SAN braid:v:1; a principal without
// it, or with another version, is refused, so a later change to this
// encoding is refused clearly by older servers rather than misread.
//
// Why mutual TLS under a cluster CA (Swift's mediator authenticates
// every agent; Panasas' MDS checks the caller before it signs a
// capability). Every connection to the MDS is TLS 1.3 with certificates
// on both sides, issued by the cluster's own CA (ECDSA P-256, stdlib
// crypto/tls and crypto/x509). Chosen over the alternatives because: a
// key exchange and per-message integrity come with it (an HMAC
// challenge in braid's own handshake would authenticate the
// connection's start but not what follows it, and would be ours to get
// right); the principal travels in the certificate, so the MDS needs no
// user database and nodes can be enrolled offline with one command; and
// it is what etcd (issue 15's engine) and Kubernetes use, so one CA can
// serve both. Kerberos would need a KDC, which `braid up` cannot ask a
// user to run. Servers are checked by CA and role, not by host name:
// clusters' addresses change (port 0, new nodes) and a client
// certificate must not pass for an MDS.
//
// TLS sits below the wire protocol as a wire.Network (Network), so the
// framing, the handshake and the simulation's network are untouched;
// the server runs each connection's TLS handshake in that connection's
// goroutine with a 10 s bound, never in the accept loop. The data path
// to the OSDs stays plain TCP guarded by capabilities (TLS there is
// optional, issue 14 point 7). A server given no credential
// (mds.Config.Credential nil) is open to anyone; only tests in one
// process run one, the command line never does.
//
// Authorization is the MDS's (internal/mds/authz.go): a table of
// operations against roles checked before a request is decoded, plus
// per-request checks where the table cannot decide: the layout of / and
// scrubs of a tree need an administrator, and a client's dirty mark
// must name a live writer lease of that file (MarkDirtyReq.Writer);
// anyone else's report queues a scrub, which verifies before it marks,
// so saying a component is lost can no longer make a file unreadable.
// OSDs are bound to their principals. POSIX permissions are checked
// apart from roles (docs/mds.md, "Permissions").
package auth
