package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// TLSConfigs are the TLS settings of the servers and of the forwarder, built once from
// configuration. A nil config means plaintext.
type TLSConfigs struct {
	// HTTP serves server.tls.
	HTTP *tls.Config
	// GRPC serves server.tls and, with routing.peerTLS, asks for (but does not require) a
	// client certificate issued by the peer CA: callers need none, peers present one.
	GRPC *tls.Config
	// Peer is the forwarder's client side: it presents the peer certificate and trusts only
	// owners whose server certificate the peer CA issued.
	Peer *tls.Config
}

// NewTLSConfigs loads the certificates; a missing or malformed file fails the start.
func NewTLSConfigs(c conf.Server, routing conf.Routing) (*TLSConfigs, error) {
	configs := &TLSConfigs{}
	if c.TLS.Enabled() {
		serverCert, err := newCertificateFiles("server.tls", c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, err
		}
		configs.HTTP = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: serverCert.forServer}
		configs.GRPC = configs.HTTP.Clone()
	}
	if p := routing.PeerTLS; p.Enabled() {
		pool, err := loadCAPool("routing.peerTLS.caFile", p.CAFile)
		if err != nil {
			return nil, err
		}
		peerCert, err := newCertificateFiles("routing.peerTLS", p.CertFile, p.KeyFile)
		if err != nil {
			return nil, err
		}
		if configs.GRPC != nil {
			configs.GRPC.ClientCAs = pool
			configs.GRPC.ClientAuth = tls.VerifyClientCertIfGiven
		}
		configs.Peer = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, GetClientCertificate: peerCert.forClient}
	}
	return configs, nil
}

func loadCAPool(key, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", key, path)
	}
	return pool, nil
}

// certificateFiles serves a certificate and key from files and picks up a renewed pair
// (cert-manager, a rotated Secret) without a restart: at most once per recheck interval
// it looks at the files' modification times and reloads when they changed.
type certificateFiles struct {
	key, certPath, keyPath string

	mu        sync.Mutex
	cert      *tls.Certificate
	modified  time.Time
	checkedAt time.Time
}

const certificateRecheck = 10 * time.Second

func newCertificateFiles(key, certPath, keyPath string) (*certificateFiles, error) {
	f := &certificateFiles{key: key, certPath: certPath, keyPath: keyPath}
	if _, err := f.current(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *certificateFiles) forServer(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.current()
}

func (f *certificateFiles) forClient(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return f.current()
}

// current returns the loaded pair, reloading it when the files changed. A renewal caught
// half-written keeps the previous pair until the next check.
func (f *certificateFiles) current() (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.cert != nil && now.Sub(f.checkedAt) < certificateRecheck {
		return f.cert, nil
	}
	f.checkedAt = now
	modified, err := latestModification(f.certPath, f.keyPath)
	if err == nil && f.cert != nil && !modified.After(f.modified) {
		return f.cert, nil
	}
	cert, loadErr := tls.LoadX509KeyPair(f.certPath, f.keyPath)
	switch {
	case loadErr == nil:
		f.cert, f.modified = &cert, modified
	case f.cert == nil:
		return nil, fmt.Errorf("%s: %w", f.key, loadErr)
	}
	return f.cert, nil
}

func latestModification(paths ...string) (time.Time, error) {
	var latest time.Time
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return time.Time{}, err
		}
		if info.ModTime().After(latest) {
			latest = info.ModTime()
		}
	}
	return latest, nil
}
