package cli

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mds"
	"github.com/braidfs/braid/internal/mdsproto"
)

// metaFlags choose where braid mds keeps its metadata: the embedded store
// in DIR (default), an etcd cluster (--meta), or an etcd member run by
// this process (--meta-peers).
type metaFlags struct {
	url       string
	peers     string
	name      string
	clientURL string
	lease     time.Duration
	allActive bool

	eng  *kv.Etcd         // set by engine, with etcd
	self kv.ProcessRecord // this process, as etcd records it
}

func (m *metaFlags) register(f *pflag.FlagSet) {
	f.StringVar(&m.url, "meta", "", "keep the metadata in an etcd cluster: etcd://host:port[,host:port...][/prefix][?max-txn-ops=N][&ca=FILE&cert=FILE&key=FILE] (TLS with a client certificate)")
	f.StringVar(&m.peers, "meta-peers", "", "run an etcd member in this process, of the cluster name=https://host:peerport,... (this one is --meta-name; members talk TLS)")
	f.StringVar(&m.name, "meta-name", "", "with --meta-peers: this member's name")
	f.StringVar(&m.clientURL, "meta-client-url", "https://127.0.0.1:2379", "with --meta-peers: where this member serves etcd clients (its MDS)")
	f.DurationVar(&m.lease, "meta-lease", 5*time.Second, "with etcd: how long the active MDS may be silent before a standby takes over")
	f.BoolVar(&m.allActive, "all-active", false, "with etcd: every MDS process serves, each the files of its share of the slots (Slice's routing), and one leads the cluster-wide duties; without it one serves and the others stand by")
}

// takeoverClockMargin is added to the grace a standby taking over gives
// clients' extent locks and cache grants (mds.Config.TakeoverGrace).
const takeoverClockMargin = time.Second

// open opens the etcd engine the flags name (nil: the embedded store in
// DIR) and checks that this MDS holds the cluster's keys (keyFile, the CA
// and DIR's key files).
func (m *metaFlags) open(ctx context.Context, cfg *mds.Config, keyFile string) (*kv.Etcd, error) {
	var eng *kv.Etcd
	switch {
	case m.url != "" && m.peers != "":
		return nil, fmt.Errorf("--meta and --meta-peers: one or the other")
	case m.url != "":
		o, err := kv.ParseEtcdURL(m.url)
		if err != nil {
			return nil, fmt.Errorf("--meta: %w", err)
		}
		if eng, err = kv.OpenEtcd(ctx, o); err != nil {
			return nil, err
		}
	case m.peers != "":
		member, err := m.member(cfg.Dir)
		if err != nil {
			return nil, err
		}
		cfg.Log.Info("starting etcd member", "name", member.Name, "peers", member.Cluster)
		if eng, err = kv.OpenEmbeddedEtcd(ctx, member, ""); err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	if err := bindKeys(ctx, eng, cfg.Dir, keyFile, cfg.Credential.CAFingerprint()); err != nil {
		eng.Close()
		return nil, err
	}
	// A successor's grace for the extent locks and cache grants of the
	// active it replaces is its own lock lease: theirs must not be longer.
	if err := eng.BindSetting(ctx, "lock-lease", cfg.LockLease.String()); err != nil {
		eng.Close()
		return nil, err
	}
	if err := eng.BindSetting(ctx, "all-active", fmt.Sprint(m.allActive)); err != nil {
		eng.Close()
		return nil, err
	}
	m.self = kv.SelfRecord(m.name, standbyAddr(cfg.Listen))
	m.eng = eng
	return eng, nil
}

// standbyAddr is where a standby will serve: --listen, unless the port is
// chosen when it listens.
func standbyAddr(listen string) string {
	if _, port, err := net.SplitHostPort(listen); err != nil || port == "0" {
		return ""
	}
	return listen
}

// lead waits until this process leads the metadata service on eng, and
// sets cfg to serve on it. The channel is closed when the lead is lost.
func (m *metaFlags) lead(ctx context.Context, cfg *mds.Config, eng *kv.Etcd) (<-chan struct{}, error) {
	cfg.Log.Info("waiting to lead the metadata service (another MDS may hold it)")
	m.self.Addr = standbyAddr(cfg.Listen) // not where it served last, if that port was chosen then
	lost, err := eng.Lead(ctx, m.lease, m.self)
	if err != nil {
		return nil, err
	}
	cfg.Log.Info("leading the metadata service")
	cfg.Engine = keepOpen{eng} // the server closes its engine; this one outlives it (standing by again)
	cfg.TakeoverGrace = takeoverClockMargin
	cfg.LeadUntil = eng.LeadUntil
	cfg.Name = m.self.Name
	cfg.MetaStatus = func(ctx context.Context) mdsproto.MetaStatus { return etcdStatus(ctx, eng) }
	return lost, nil
}

// join makes this process one of several active ones on eng, and sets
// cfg to serve so. The channel is closed when its session ends.
func (m *metaFlags) join(ctx context.Context, cfg *mds.Config, eng *kv.Etcd) (<-chan struct{}, error) {
	m.self.Addr = standbyAddr(cfg.Listen)
	m.self.Joined = true
	over, err := eng.Join(ctx, m.lease, m.self)
	if err != nil {
		return nil, err
	}
	cfg.Log.Info("serving as one of several active MDS processes")
	cfg.Engine = keepOpen{eng}
	cfg.TakeoverGrace = takeoverClockMargin
	cfg.LeadUntil = eng.LeadUntil
	cfg.ServeUntil = eng.ServeUntil
	cfg.Name = m.self.Name
	cfg.Actives = func(ctx context.Context) ([]mdsproto.RouteServer, error) {
		ps, err := eng.Processes(ctx)
		if err != nil {
			return nil, err
		}
		var out []mdsproto.RouteServer
		for _, p := range ps {
			if p.Joined {
				out = append(out, mdsproto.RouteServer{Name: p.Name, Addr: p.Addr})
			}
		}
		return out, nil
	}
	cfg.MetaStatus = func(ctx context.Context) mdsproto.MetaStatus { return etcdStatus(ctx, eng) }
	return over, nil
}

// keepOpen is an engine whose Close leaves it open.
type keepOpen struct{ kv.Engine }

func (keepOpen) Close() error { return nil }

// announce records where this MDS serves, once it listens (with etcd).
func (m *metaFlags) announce(ctx context.Context, addr string) error {
	if m.eng == nil {
		return nil
	}
	m.self.Addr = addr
	return m.eng.Announce(ctx, m.self)
}

// etcdStatus is the metadata service on etcd, for status.
func etcdStatus(ctx context.Context, eng *kv.Etcd) mdsproto.MetaStatus {
	out := mdsproto.MetaStatus{Engine: "etcd", Requests: mdsproto.EngineRequests(eng.Stats())}
	ps, err := eng.Processes(ctx)
	if err != nil {
		out.Members = append(out.Members, mdsproto.EngineMember{Error: "listing MDS processes: " + err.Error()})
	}
	for _, p := range ps {
		out.MDS = append(out.MDS, mdsproto.MDSProcess{Name: p.Name, Addr: p.Addr, Pid: p.Pid, Host: p.Host, Role: p.Role, StartedNs: p.StartedNs})
	}
	for _, m := range eng.Members(ctx) {
		out.Members = append(out.Members, mdsproto.EngineMember(m))
	}
	return out
}

// member is this process's etcd member from --meta-peers and --meta-name.
func (m *metaFlags) member(dir string) (kv.EtcdMember, error) {
	if m.name == "" {
		return kv.EtcdMember{}, fmt.Errorf("--meta-peers needs --meta-name: which of them this process is")
	}
	out := kv.EtcdMember{Name: m.name, Dir: filepath.Join(dir, "etcd"), ClientURL: m.clientURL, Cluster: m.peers}
	for _, p := range strings.Split(m.peers, ",") {
		if name, url, ok := strings.Cut(strings.TrimSpace(p), "="); ok && name == m.name {
			out.PeerURL = url
		}
	}
	if out.PeerURL == "" {
		return kv.EtcdMember{}, fmt.Errorf("--meta-peers %q names no member %q", m.peers, m.name)
	}
	var err error
	out.TLS, err = memberTLS(dir, m.name, out.ClientURL, out.PeerURL)
	return out, err
}

// memberTLS writes this member's TLS material into DIR/etcd-tls: the etcd
// CA every MDS derives from filekeys.key, which they share and nothing
// else holds (auth.DeriveEtcdPKI), and a certificate for the hosts of its
// URLs, made afresh at each start.
func memberTLS(dir, name string, urls ...string) (*kv.EtcdTLSFiles, error) {
	keyFiles, err := mds.EnsureKeyFiles(dir)
	if err != nil {
		return nil, err
	}
	var secret []byte
	for _, f := range keyFiles {
		if filepath.Base(f) == "filekeys.key" {
			if secret, err = os.ReadFile(f); err != nil {
				return nil, err
			}
		}
	}
	var hosts []string
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() == "" {
			return nil, fmt.Errorf("etcd URL %q: want https://host:port", u)
		}
		hosts = append(hosts, pu.Hostname())
	}
	pki, err := auth.DeriveEtcdPKI(secret, name, hosts, time.Now())
	if err != nil {
		return nil, err
	}
	tlsDir := filepath.Join(dir, "etcd-tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, err
	}
	files := &kv.EtcdTLSFiles{CA: filepath.Join(tlsDir, "ca.pem"), Cert: filepath.Join(tlsDir, "member.pem"), Key: filepath.Join(tlsDir, "member.key")}
	for _, f := range []struct {
		path string
		b    []byte
	}{{files.CA, pki.CA}, {files.Cert, pki.Cert}, {files.Key, pki.Key}} {
		if err := durable.WriteFile(f.path, f.b, 0o600); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// bindKeys checks this MDS's key files and CA against the ones the
// cluster's first MDS recorded (recording them if it is the first).
func bindKeys(ctx context.Context, eng *kv.Etcd, dir, keyFile string, ca [32]byte) error {
	files, err := mds.EnsureKeyFiles(dir)
	if err != nil {
		return err
	}
	files = append(files, keyFile)
	h := sha256.New()
	h.Write(ca[:])
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f), len(b))
		h.Write(b)
	}
	if err := eng.BindKeys(ctx, h.Sum(nil)); err != nil {
		if errors.Is(err, kv.ErrKeysDiffer) {
			return fmt.Errorf("%w: copy the first MDS's DIR/auth, cluster.key, filekeys.key and s3secrets.key over this one's (in %s)", err, dir)
		}
		return err
	}
	return nil
}
