package conf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The client's transport follows the txmanager section: plaintext by default, TLS trusting a
// CA file read at load (a file that is missing or holds no certificate refuses the
// configuration), and the mesh's plaintext credentials only when asked for.
func TestTxManagerTransport(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		tx        TxManager
		wantErr   string
		wantTLS   bool
		wantRoots bool
		plaintext bool
	}{
		{name: "plaintext", tx: TxManager{}},
		{name: "TLS with the system's CAs", tx: TxManager{TLS: true}, wantTLS: true},
		{name: "TLS trusting a CA file", tx: TxManager{CAFile: caFile}, wantTLS: true, wantRoots: true},
		{name: "a CA file that is missing", tx: TxManager{CAFile: filepath.Join(dir, "gone.pem")}, wantErr: "txmanager.caFile"},
		{name: "a CA file without a certificate", tx: TxManager{CAFile: notPEM}, wantErr: "no PEM certificate"},
		{name: "plaintext credentials in a mesh", tx: TxManager{PlaintextCredentials: true}, plaintext: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bc := &Bootstrap{Database: Database{DSN: "postgres://db/payouts"}, TxManager: tc.tx, Payouts: Payouts{Signer: "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"}}
			bc.TxManager.Endpoints = "txmanager.internal:9090"
			bc.applyDefaults()
			err := bc.Check()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Check: %v, want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := ClientConfig(bc)
			if (cfg.TLS != nil) != tc.wantTLS || (cfg.TLS != nil && (cfg.TLS.RootCAs != nil) != tc.wantRoots) || cfg.PlaintextCredentials != tc.plaintext {
				t.Fatalf("client config: TLS %v, plaintext credentials %v; want TLS %v (own roots %v), plaintext %v", cfg.TLS, cfg.PlaintextCredentials, tc.wantTLS, tc.wantRoots, tc.plaintext)
			}
		})
	}
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "payouts test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
