package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// testPKI is a CA and certificates it issued, as files the configuration names.
type testPKI struct {
	dir    string
	caFile string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txm test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &testPKI{dir: dir, ca: ca, caKey: key}
	p.caFile = writeFile(t, dir, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

// issue writes a certificate for 127.0.0.1 named name (its common name), usable by
// servers and clients, and returns the paths of the certificate and its key.
func (p *testPKI) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	template := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = writeFile(t, p.dir, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile = writeFile(t, p.dir, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

// commonName reads the subject of the certificate a config's callback serves.
func commonName(t *testing.T) func(cert *tls.Certificate, err error) string {
	return func(cert *tls.Certificate, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.Subject.CommonName
	}
}

// The servers and the forwarder get exactly the TLS the configuration asks for: server
// certificates for callers, and with peer TLS a gRPC server that asks peers for a
// certificate (callers need none) and a forwarder that presents its own and trusts only
// the peer CA.
func TestTLSConfigsFollowTheConfiguration(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	serverCert, serverKey := pki.issue(t, "server")
	peerCert, peerKey := pki.issue(t, "peer")
	otherCert, _ := pki.issue(t, "other")
	serverTLS := conf.TLS{CertFile: serverCert, KeyFile: serverKey}
	peerTLS := conf.PeerTLS{CAFile: pki.caFile, CertFile: peerCert, KeyFile: peerKey}
	tests := []struct {
		name    string
		server  conf.TLS
		peer    conf.PeerTLS
		want    string // what the configs hold: servers (s), peer-asking gRPC (g), forwarder (f)
		wantErr string
	}{
		{name: "plaintext", want: ""},
		{name: "server TLS", server: serverTLS, want: "s"},
		{name: "server and peer TLS", server: serverTLS, peer: peerTLS, want: "sgf"},
		{name: "peer TLS behind a TLS-terminating proxy", peer: peerTLS, want: "f"},
		{name: "a server certificate that is missing", server: conf.TLS{CertFile: filepath.Join(pki.dir, "none.pem"), KeyFile: serverKey}, wantErr: "server.tls:"},
		{name: "a key that is not the certificate's", server: conf.TLS{CertFile: otherCert, KeyFile: serverKey}, wantErr: "server.tls:"},
		{name: "a peer CA that is missing", server: serverTLS, peer: conf.PeerTLS{CAFile: filepath.Join(pki.dir, "none.pem"), CertFile: peerCert, KeyFile: peerKey},
			wantErr: "routing.peerTLS.caFile:"},
		{name: "a peer CA file without a certificate", peer: conf.PeerTLS{CAFile: peerKey, CertFile: peerCert, KeyFile: peerKey}, wantErr: "holds no PEM certificate"},
		{name: "a peer certificate that is missing", peer: conf.PeerTLS{CAFile: pki.caFile, CertFile: filepath.Join(pki.dir, "none.pem"), KeyFile: peerKey},
			wantErr: "routing.peerTLS:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			configs, err := NewTLSConfigs(conf.Server{TLS: tt.server}, conf.Routing{PeerTLS: tt.peer})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if configs.HTTP != nil {
				got += "s"
				if configs.HTTP.MinVersion != tls.VersionTLS12 || configs.HTTP.ClientAuth != tls.NoClientCert {
					t.Errorf("HTTP TLS min version %x client auth %v", configs.HTTP.MinVersion, configs.HTTP.ClientAuth)
				}
				if name := commonName(t)(configs.HTTP.GetCertificate(&tls.ClientHelloInfo{})); name != "server" {
					t.Errorf("HTTP serves %q, want the server certificate", name)
				}
			}
			if configs.GRPC != nil && configs.GRPC.ClientAuth == tls.VerifyClientCertIfGiven && configs.GRPC.ClientCAs != nil {
				got += "g"
			}
			if configs.Peer != nil {
				got += "f"
				if configs.Peer.RootCAs == nil {
					t.Error("the forwarder trusts the system roots, not the peer CA")
				}
				if name := commonName(t)(configs.Peer.GetClientCertificate(&tls.CertificateRequestInfo{})); name != "peer" {
					t.Errorf("the forwarder presents %q, want the peer certificate", name)
				}
			}
			if got != tt.want {
				t.Fatalf("configs %q, want %q", got, tt.want)
			}
		})
	}
}

// A renewed certificate (cert-manager rewriting the files) is served without a restart,
// once the recheck interval has passed; one caught half-written keeps the previous pair.
func TestCertificateFilesPickUpARenewal(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	certFile, keyFile := pki.issue(t, "first")
	files, err := newCertificateFiles("server.tls", certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	// replace overwrites the served files with name's pair (or garbage) dated later.
	replace := func(t *testing.T, name string, age time.Duration) {
		cert, key := []byte("not a certificate"), []byte("not a key")
		if name != "" {
			newCert, newKey := pki.issue(t, name)
			cert, _ = os.ReadFile(newCert)
			key, _ = os.ReadFile(newKey)
		}
		for path, content := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(age)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	steps := []struct {
		name string
		// renew writes a new pair named so ("" for a half-written one) before the step.
		renew      string
		recheckDue bool
		want       string
	}{
		{name: "as loaded", want: "first"},
		{name: "renewed, within the recheck interval", renew: "second", want: "first"},
		{name: "renewed, recheck due", recheckDue: true, want: "second"},
		{name: "half-written renewal", renew: "", recheckDue: true, want: "second"},
		{name: "a completed renewal after it", renew: "third", recheckDue: true, want: "third"},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if i > 0 && (s.renew != "" || s.name == "half-written renewal") {
				replace(t, s.renew, time.Duration(i)*time.Minute)
			}
			if s.recheckDue {
				files.mu.Lock()
				files.checkedAt = time.Now().Add(-2 * certificateRecheck)
				files.mu.Unlock()
			}
			if got := commonName(t)(files.forServer(nil)); got != s.want {
				t.Fatalf("serving %q, want %q", got, s.want)
			}
		})
	}
}
