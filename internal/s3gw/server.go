package s3gw

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/s3api"
	"github.com/versity/versitygw/s3api/middlewares"

	"github.com/braidfs/braid"
)

// Config of a gateway.
type Config struct {
	// Listen is host:port; port 0 picks a free one (Addr tells which).
	Listen string
	// Region is the one clients sign for; "" is us-east-1.
	Region string
	// MaxConnections and MaxInflightRequests bound the gateway's load
	// (further requests get 503 SlowDown); 0 picks the defaults.
	MaxConnections      int
	MaxInflightRequests int
	Log                 *slog.Logger // nil: slog's default
}

const (
	defaultRegion              = "us-east-1"
	defaultMaxConnections      = 1024
	defaultMaxInflightRequests = 256
	startTimeout               = 10 * time.Second
	idleTimeout                = time.Minute // between a connection's requests
)

// Server is a running gateway.
type Server struct {
	api       *s3api.S3ApiServer
	addr      string
	done      chan error
	stopSweep context.CancelFunc
	swept     chan struct{}
}

// Start serves cl's namespace over S3 until Close.
func Start(ctx context.Context, cl *braid.Client, cfg Config) (*Server, error) {
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = defaultMaxConnections
	}
	if cfg.MaxInflightRequests <= 0 {
		cfg.MaxInflightRequests = defaultMaxInflightRequests
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("s3 listen address %q: %w", cfg.Listen, err)
	}
	s, err := startOn(ctx, cl, cfg, ln)
	if err != nil {
		ln.Close()
	}
	return s, err
}

func startOn(ctx context.Context, cl *braid.Client, cfg Config, ln net.Listener) (*Server, error) {
	listening := make(chan struct{})
	users := newIAM(cl)
	be := newBackend(cl, users.user)
	api, err := s3api.New(be, middlewares.RootUserConfig{Access: unusableRootKey(), Secret: unusableRootKey()},
		cfg.Region, users, nil, nil, nil, nil,
		s3api.WithConcurrencyLimiter(cfg.MaxConnections, cfg.MaxInflightRequests),
		s3api.WithQuiet(), s3api.WithKeepAlive(), s3api.WithHealth("/braid-health"))
	if err != nil {
		return nil, fmt.Errorf("s3 gateway: %w", err)
	}
	app, err := fiberApp(api)
	if err != nil {
		return nil, err
	}
	// The listener bounds connections (listen.go); the HTTP server's own
	// bound, which answers 503, stays above it for those closing.
	app.Server().Concurrency = 4 * cfg.MaxConnections
	app.Server().IdleTimeout = idleTimeout
	// A request's header within headerTimeout of its first byte; its
	// body at the pace progressTimeout sets (listen.go).
	app.Server().ReadTimeout = headerTimeout
	app.Server().HeaderReceived = func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
		return fasthttp.RequestConfig{ReadTimeout: bodyTimeout}
	}
	app.Server().Handler = refuseSSE(app.Server().Handler)
	app.Hooks().OnListen(func(fiber.ListenData) error { close(listening); return nil })
	lim := newLimitListener(ln, cfg.MaxConnections, max(1, cfg.MaxConnections/4), cmp.Or(cfg.Log, slog.Default()))
	s := &Server{api: api, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { s.done <- app.Listener(lim, fiber.ListenConfig{DisableStartupMessage: true}) }()
	select {
	case <-listening:
		sweepCtx, cancel := context.WithCancel(context.Background())
		s.stopSweep, s.swept = cancel, make(chan struct{})
		go func() {
			defer close(s.swept)
			be.sweepLoop(sweepCtx, time.Now)
		}()
		return s, nil
	case err := <-s.done:
		return nil, fmt.Errorf("s3 gateway on %s: %w", s.addr, err)
	case <-ctx.Done():
		_ = api.ShutDown()
		return nil, ctx.Err()
	case <-time.After(startTimeout):
		_ = api.ShutDown()
		return nil, errors.New("s3 gateway did not start listening")
	}
}

// unusableRootKey fills versitygw's root account with a random key nobody
// knows: braid has no root S3 user, only the users the MDS keeps.
func unusableRootKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Addr is the address the gateway listens on.
func (s *Server) Addr() string { return s.addr }

// Close stops the gateway, letting requests in flight finish (bounded).
func (s *Server) Close() error {
	s.stopSweep()
	err := s.api.ShutDown()
	<-s.done
	<-s.swept
	return err
}
