// Package auth is who may talk to the MDS: a cluster certificate
// authority, the credentials it issues, and mutual TLS on the MDS's
// port (ARCHITECTURE.md, Security, says why mutual TLS).
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
package auth
