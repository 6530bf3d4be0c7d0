package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
)

// floodFrom opens n connections to addr from local address src, each
// sending first (nothing if empty), and returns those the server took.
func floodFrom(t *testing.T, src, addr string, n int, first []byte) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue // refused or reset: the server is full
		}
		if len(first) > 0 {
			_, _ = c.Write(first)
		}
		conns = append(conns, c)
	}
	return conns
}

// helloFrame is a braid protocol 2 hello (internal/wire/handshake.go),
// built by hand as a hostile client would.
func helloFrame() []byte {
	meta := make([]byte, 30)
	binary.LittleEndian.PutUint64(meta, 0x5eed)
	binary.LittleEndian.PutUint64(meta[8:], 1)
	binary.LittleEndian.PutUint16(meta[16:], 2)
	binary.LittleEndian.PutUint16(meta[18:], 2)
	h := make([]byte, 36)
	copy(h, "BRD1")
	h[4], h[5] = 1, 1
	binary.LittleEndian.PutUint16(h[6:], 0xFFFF)
	binary.LittleEndian.PutUint32(h[16:], uint32(len(meta)))
	table := crc32.MakeTable(crc32.Castagnoli)
	binary.LittleEndian.PutUint32(h[32:], crc32.Update(crc32.Checksum(h[:32], table), table, meta))
	return append(h, meta...)
}

// credentialedFlood opens n TLS connections to the MDS at addr from src
// as the holder of cred, each saying hello and then sending the first
// 20 bytes of a frame, and returns those the MDS took.
func credentialedFlood(t *testing.T, src, addr string, n int, cred *auth.Credential) []net.Conn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	cfg := cred.ClientTLS(auth.RoleMDS)
	hello := helloFrame()
	var conns []net.Conn
	welcome := make([]byte, 64)
	for i := 0; i < n; i++ {
		c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(hello); err != nil {
			c.Close()
			continue
		}
		if _, err := c.Read(welcome); err != nil {
			c.Close()
			continue
		}
		_ = c.SetDeadline(time.Time{})
		_, _ = c.Write(hello[:20])
		conns = append(conns, c)
	}
	return conns
}

// The probes that found servers deaf, run against every listening port
// of a cluster: from four local addresses, 1,100 connections each that
// send the first 20 bytes of a frame header (or of a TLS handshake, or
// most of an HTTP request's header) and then nothing. 4,400 pass the
// 4,096 connections a server keeps and the 1,024 one address may hold
// (the gateway: 1,024 and 256). Through each flood a new client's real
// work succeeds: a stat at the MDS, a write and read back across every
// OSD (one of them serving data over TLS), a signed PUT and GET at the
// S3 gateway.
func TestFloodsAtEveryPort(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 4,400 sockets at each of six ports")
	}
	c := StartCluster(t, 5)
	tlsOSD := c.start("osd5", "osd", "--dir", filepath.Join(c.Dir, "osd5"),
		"--listen", "127.0.0.1:0", "--mds-addr", c.MDS.Addr, "--key-file", c.key, "--heartbeat", "200ms",
		"--cred", c.Cred("osd5", auth.RoleOSD), "--tls")
	c.OSDs = append(c.OSDs, tlsOSD)
	c.WaitUp(6)
	gw := c.start("s3", "s3", "--mds", c.MDS.Addr, "--cred", c.Cred("s3", auth.RoleGateway), "--listen", "127.0.0.1:0")
	ctx := context.Background()
	admin := c.Client()
	key, err := admin.S3UserAdd(ctx, "prober")
	if err != nil {
		t.Fatal(err)
	}
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + gw.Addr), UsePathStyle: true,
		Credentials:      credentials.NewStaticCredentialsProvider(key.AccessKey, key.SecretKey, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("probe")}); err != nil {
		t.Fatal(err)
	}

	data := bytes.Repeat([]byte("through the flood "), 20_000)
	realWork := map[string]func(round int) error{
		"mds": func(int) error {
			cl, err := braid.DialOptions(ctx, c.MDS.Addr, c.Options())
			if err != nil {
				return err
			}
			defer cl.Close()
			_, err = cl.Stat(ctx, "/")
			return err
		},
		"osd": func(round int) error {
			cl, err := braid.DialOptions(ctx, c.MDS.Addr, c.Options())
			if err != nil {
				return err
			}
			defer cl.Close()
			name := fmt.Sprintf("/flood%d", round)
			f, err := cl.Create(ctx, name, braid.CreateOptions{Layout: "ec:4+2"})
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(data, 0); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			r, err := cl.Open(ctx, name)
			if err != nil {
				return err
			}
			defer r.Close()
			got := make([]byte, len(data))
			if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				return fmt.Errorf("read back: %v", err)
			}
			// Every component written: none left for repair.
			st, err := cl.Status(ctx)
			if err != nil {
				return err
			}
			if st.Health != "ok" {
				return fmt.Errorf("written degraded: health %s: %v", st.Health, st.Problems)
			}
			return nil
		},
		"s3": func(round int) error {
			k := fmt.Sprintf("k%d", round)
			if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("probe"), Key: aws.String(k), Body: bytes.NewReader(data)}); err != nil {
				return err
			}
			out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("probe"), Key: aws.String(k)})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			var got bytes.Buffer
			if _, err := got.ReadFrom(out.Body); err != nil || !bytes.Equal(got.Bytes(), data) {
				return fmt.Errorf("get back: %v", err)
			}
			return nil
		},
	}

	clientCred, err := auth.LoadCredential(c.Cred("mallory", auth.RoleClient))
	if err != nil {
		t.Fatal(err)
	}
	var partialFrame [20]byte
	copy(partialFrame[:], "BRD1\x01\x01\x01\x00")
	partialTLS := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	slowHTTP := []byte("GET /probe/k HTTP/1.1\r\nHost: x\r\n")
	ports := []struct {
		name, addr, work string
		perAddr          int
		first            []byte
		cred             *auth.Credential // a client's, to flood past TLS
	}{
		{"MDS (TLS), idle", c.MDS.Addr, "mds", 1100, nil, nil},
		{"MDS (TLS), partial handshake", c.MDS.Addr, "mds", 1100, partialTLS, nil},
		{"MDS (TLS), a client's partial frames", c.MDS.Addr, "mds", 1100, nil, clientCred},
		{"OSD, partial frame", c.OSDs[0].Addr, "osd", 1100, partialFrame[:], nil},
		{"OSD (data TLS), partial handshake", tlsOSD.Addr, "osd", 1100, partialTLS, nil},
		{"S3, idle", gw.Addr, "s3", 300, nil, nil},
		{"S3, slow header", gw.Addr, "s3", 300, slowHTTP, nil},
	}
	round := 0
	for _, p := range ports {
		t.Run(p.name, func(t *testing.T) {
			var flood []net.Conn
			defer func() {
				for _, conn := range flood {
					conn.Close()
				}
			}()
			for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
				if p.cred != nil {
					flood = append(flood, credentialedFlood(t, src, p.addr, p.perAddr, p.cred)...)
					continue
				}
				flood = append(flood, floodFrom(t, src, p.addr, p.perAddr, p.first)...)
			}
			for i := 0; i < 3; i++ {
				round++
				if err := realWork[p.work](round); err != nil {
					t.Fatalf("real work %d through %d connections: %v", i, len(flood), err)
				}
			}
		})
	}
}
