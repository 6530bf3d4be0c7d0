package kv

// An etcd member inside the MDS process (braid mds --meta-peers): three
// MDS processes form a Raft quorum with no other service to run. The
// member is etcd's own server (go.etcd.io/etcd/server/v3/embed), with
// limits raised for braid's transactions.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

const (
	// etcdMaxTxnOps is what braid's members allow in one txn (etcd's
	// default is 128): a transaction's writes, and the compares that guard
	// it.
	etcdMaxTxnOps = 4096
	// etcdMaxRequestBytes is etcd's default, kept: it bounds what a
	// member proposes to Raft at once.
	etcdMaxRequestBytes = 3 << 19 // 1.5 MiB
	// etcdStartTimeout bounds waiting for a member to join its cluster.
	etcdStartTimeout = time.Minute
	// etcdQuotaBytes is the database size a member allows (etcd's default
	// is 2 GiB; 8 GiB is the most it recommends).
	etcdQuotaBytes = 8 << 30
)

// EtcdMember is one member of an embedded etcd cluster.
type EtcdMember struct {
	Name      string // unique in the cluster
	Dir       string // its data directory
	ClientURL string // where it serves clients, e.g. http://127.0.0.1:2379
	PeerURL   string // where it talks Raft with the others, e.g. http://127.0.0.1:2380
	// Cluster is every member as name=peerURL, comma-separated ("": this
	// one alone).
	Cluster string
	// LogLevel is etcd's (debug, info, warn, error); "" is error.
	LogLevel string
	// TLS, if set, makes the member talk mutual TLS to its peers and its
	// clients (URLs https://), admitting only certificates of TLS.CA.
	TLS *EtcdTLSFiles
}

// EtcdTLSFiles are a member's TLS material, as PEM files.
type EtcdTLSFiles struct {
	CA, Cert, Key string
}

// clientTLS is the configuration an engine reaches its member with.
func (f *EtcdTLSFiles) clientTLS() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("etcd member certificate: %w", err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", f.CA)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// OpenEmbeddedEtcd starts member m and returns an engine over the cluster
// it belongs to; Close stops both.
func OpenEmbeddedEtcd(ctx context.Context, m EtcdMember, prefix string) (*Etcd, error) {
	o := EtcdOptions{Endpoints: []string{m.ClientURL}, Prefix: prefix, MaxTxnOps: etcdMaxTxnOps}
	if m.TLS != nil {
		var err error
		if o.TLS, err = m.TLS.clientTLS(); err != nil {
			return nil, err
		}
	}
	srv, err := startMember(m)
	if err != nil {
		return nil, err
	}
	e, err := OpenEtcd(ctx, o)
	if err != nil {
		srv.Close()
		return nil, err
	}
	e.onClose = func() error { srv.Close(); return nil }
	return e, nil
}

func startMember(m EtcdMember) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, m.Dir
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcd client URL %q: %w", m.ClientURL, err)
	}
	pu, err := url.Parse(m.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcd peer URL %q: %w", m.PeerURL, err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	if err := checkSchemes(m); err != nil {
		return nil, err
	}
	if m.TLS != nil {
		info := transport.TLSInfo{CertFile: m.TLS.Cert, KeyFile: m.TLS.Key, TrustedCAFile: m.TLS.CA, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	cfg.InitialCluster = m.Cluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = m.Name + "=" + m.PeerURL
	}
	cfg.MaxTxnOps, cfg.MaxRequestBytes, cfg.QuotaBackendBytes = etcdMaxTxnOps, etcdMaxRequestBytes, etcdQuotaBytes
	cfg.LogLevel = m.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
	}
	// Old revisions are compacted away after an hour: a snapshot older
	// than that is a conflict, and the history does not grow for ever.
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = embed.CompactorModePeriodic, "1h"
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	select {
	case <-srv.Server.ReadyNotify():
		return srv, nil
	case err := <-srv.Err():
		srv.Close()
		return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
	case <-time.After(etcdStartTimeout):
		srv.Close()
		return nil, fmt.Errorf("etcd member %s: not ready after %s (are the other members up? %s)", m.Name, etcdStartTimeout, m.Cluster)
	}
}

// checkSchemes refuses a member whose URLs do not all say what it talks:
// https with TLS, http without.
func checkSchemes(m EtcdMember) error {
	want := "http"
	if m.TLS != nil {
		want = "https"
	}
	urls := []string{m.ClientURL, m.PeerURL}
	for _, p := range strings.Split(m.Cluster, ",") {
		if _, u, ok := strings.Cut(p, "="); ok {
			urls = append(urls, u)
		}
	}
	for _, u := range urls {
		if pu, err := url.Parse(strings.TrimSpace(u)); err != nil || pu.Scheme != want {
			return fmt.Errorf("etcd member %s: URL %q: want %s://", m.Name, u, want)
		}
	}
	return nil
}

// ParseEtcdURL reads
// "etcd://host:port,host:port[/prefix][?max-txn-ops=N][&ca=F&cert=F&key=F]"
// into options: N is the cluster's --max-txn-ops, if not etcd's default;
// ca, cert and key (PEM files, all three) make the engine talk TLS to the
// cluster, as a client with that certificate, trusting that CA only.
func ParseEtcdURL(s string) (EtcdOptions, error) {
	rest, ok := strings.CutPrefix(s, "etcd://")
	if !ok || rest == "" {
		return EtcdOptions{}, errors.New(`want etcd://host:port[,host:port...][/prefix][?max-txn-ops=N]`)
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, prefix, _ := strings.Cut(rest, "/")
	var o EtcdOptions
	if query != "" {
		v, err := url.ParseQuery(query)
		if err != nil {
			return EtcdOptions{}, fmt.Errorf("%q: %w", s, err)
		}
		if n := v.Get("max-txn-ops"); n != "" {
			if o.MaxTxnOps, err = strconv.Atoi(n); err != nil || o.MaxTxnOps < 16 {
				return EtcdOptions{}, fmt.Errorf("%q: max-txn-ops=%s: want a number of at least 16", s, n)
			}
		}
		files := EtcdTLSFiles{CA: v.Get("ca"), Cert: v.Get("cert"), Key: v.Get("key")}
		switch {
		case files == EtcdTLSFiles{}:
		case files.CA == "" || files.Cert == "" || files.Key == "":
			return EtcdOptions{}, fmt.Errorf("%q: TLS needs ca=, cert= and key= together", s)
		default:
			if o.TLS, err = files.clientTLS(); err != nil {
				return EtcdOptions{}, fmt.Errorf("%q: %w", s, err)
			}
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.Endpoints = append(o.Endpoints, h)
		}
	}
	if len(o.Endpoints) == 0 {
		return EtcdOptions{}, fmt.Errorf("%q names no etcd endpoint", s)
	}
	if prefix != "" {
		o.Prefix = strings.TrimSuffix(prefix, "/") + "/"
	}
	return o, nil
}
