package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Issue 6: after a create -> confirm cycle /metrics carries every metric that
// docs/operations.md#metrics lists, with a non-zero sample where the cycle must have
// produced one.
func TestMetricsAfterACreateConfirmCycle(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
	}})
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 1), "value": "1", "gasLimit": 21000})
	waitFor(t, 30*time.Second, "confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })

	samples := s.metricSums(t)
	tests := []struct {
		metric  string
		nonZero bool
	}{
		{"lease_acquire_total", true},
		{"lease_fenced_total", false},
		{"writer_queue_depth", false},
		{"tx_create_total", true},
		{"tx_submit_total", true},
		{"receipt_check_total", true},
		{"pending_oldest_age_seconds", false},
		{"resubmit_total", false},
		{"stuck_total", false},
		{"reorg_total", false},
		{"db_tx_duration_seconds_count", true},
		{"db_tx_active", false},
		{"db_tx_retries_total", false},
		{"db_tx_failures_total", false},
		{"server_requests_code_total", true},
		{"server_requests_seconds_bucket_count", true},
		{"database_pool_max_connections", true},
		{"database_pool_connections", true},
		// Opening a connection counts as a wait, and the service opened some.
		{"database_pool_acquire_waits_total", true},
		{"database_pool_acquire_wait_seconds_total", false},
	}
	for _, tc := range tests {
		v, present := samples[tc.metric]
		switch {
		case !present:
			t.Errorf("%s missing from /metrics", tc.metric)
		case tc.nonZero && v == 0:
			t.Errorf("%s is 0 after a create -> confirm cycle", tc.metric)
		}
	}
	if t.Failed() {
		t.Logf("/metrics sums: %v", samples)
	}
}

// Every metric has one series per label set: where a metric is recorded per chain, no
// series without chain_id stands beside it (a panel or alert that picks that one reads a
// 0 that never moves). A confirmation's completion waits for no sequencer round: the
// finality statement positions it, and the feed's lag reads 0 at the next scrape.
func TestMetricsHaveNoUnlabelledTwins(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
	}})
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 1), "value": "1", "gasLimit": 21000})
	waitFor(t, 30*time.Second, "confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })

	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(s.do(t, http.MethodGet, "/metrics", nil).raw))
	if err != nil {
		t.Fatal(err)
	}
	perChain := 0
	for name, family := range families {
		var with, without []string
		for _, m := range family.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			chain := false
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
				chain = chain || l.GetName() == "chain_id"
			}
			if chain {
				with = append(with, strings.Join(labels, ","))
			} else {
				without = append(without, "{"+strings.Join(labels, ",")+"}")
			}
		}
		if len(with) > 0 {
			perChain++
		}
		if len(with) > 0 && len(without) > 0 {
			t.Errorf("%s has series with chain_id and without it: %v", name, without)
		}
	}
	if perChain < 10 {
		t.Errorf("only %d metrics carry chain_id; the check above would prove little", perChain)
	}
	// The test database is a standalone server: its commits wait for no standby, and the
	// service says so in the metric and /readyz.
	if sync := families["database_synchronous_replication"]; sync == nil || len(sync.GetMetric()) != 1 || sync.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("database_synchronous_replication: %v, want 0 (asynchronous)", sync)
	}
	ready := s.do(t, http.MethodGet, "/readyz", nil)
	if checks, _ := ready.body["checks"].(map[string]any); !strings.HasPrefix(fmt.Sprint(checks["database_replication"]), "asynchronous (synchronous_commit=") {
		t.Errorf("/readyz replication detail: %s", ready.raw)
	}
	lag := families["completions_feed_lag_seconds"]
	if lag == nil || len(lag.GetMetric()) == 0 || lag.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("completions_feed_lag_seconds after a confirmation: %v, want 0 (positioned by the finality statement itself)", lag)
	}
}

// Issue 6: no private key, passphrase, API key, bearer token or database password reaches
// the logs, whatever the requests (good and bad credentials) and whichever key sources.
func TestSecretsNeverReachTheLogs(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	rawKey := hexutil.Encode(crypto.FromECDSA(sim.DevKeys()[0]))

	// A keystore account holding another dev key, unlocked by a passphrase file.
	const passphrase = "correct horse battery staple 42"
	ksDir := t.TempDir()
	ks := keystore.NewKeyStore(ksDir, keystore.LightScryptN, keystore.LightScryptP)
	if _, err := ks.ImportECDSA(sim.DevKeys()[1], passphrase); err != nil {
		t.Fatal(err)
	}
	passFile := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(passFile, []byte(passphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const password = "Db-Passw0rd-Never-Logged"
	dsn := withPassword(t, testsupport.MigratedDSN(t), password)
	secretFile := filepath.Join(t.TempDir(), "jwt.secret")
	if err := os.WriteFile(secretFile, []byte(jwtSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testsupport.LogBuffer{}
	s := startService(t, serviceOptions{chain: sim, dsn: dsn, fastPipeline: true, logs: logs, configure: func(bc *conf.Bootstrap) {
		bc.Signers.Keystore = conf.KeystoreSource{Dir: ksDir, PassphraseFile: passFile}
		bc.Database.MigrationDSN = dsn
		bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{{ID: "ops", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true}},
			JWT: conf.JWT{HMACSecretFile: secretFile}}
	}})
	token := signToken(t, map[string]any{"sub": "svc", "exp": time.Now().Add(time.Hour).Unix(), "signers": []string{"*"}}, jwtSecret)
	body := func(signer string) []byte {
		return []byte(`{"signer":"` + signer + `","to":"` + sim.DevAddresses()[7].Hex() + `","value":"1","gasLimit":21000}`)
	}
	// Successes with each credential and each key source, then failures of every kind.
	for i, signer := range []string{sim.DevAddresses()[0].Hex(), sim.DevAddresses()[1].Hex()} {
		if a := s.doAs(t, http.MethodPost, "/api/v1/tx", body(signer), "X-API-Key", adminKey); a.status != http.StatusAccepted {
			t.Fatalf("create %d with API key: %d %s", i, a.status, a.raw)
		}
		if a := s.doAs(t, http.MethodPost, "/api/v1/tx", body(signer), "Authorization", "Bearer "+token); a.status != http.StatusAccepted {
			t.Fatalf("create %d with JWT: %d %s", i, a.status, a.raw)
		}
	}
	s.doAs(t, http.MethodPost, "/api/v1/tx", body(sim.DevAddresses()[0].Hex()), "X-API-Key", adminKey+"-wrong")
	s.doAs(t, http.MethodPost, "/api/v1/tx", body(sim.DevAddresses()[0].Hex()), "Authorization", "Bearer "+token+"x")
	s.doAs(t, http.MethodPost, "/api/v1/tx", []byte(`{"signer":"`+rawKey+`"}`), "X-API-Key", adminKey)
	waitFor(t, 30*time.Second, "transactions confirmed", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'") == 4
	})
	all := logs.String()
	if len(all) < 1000 {
		t.Fatalf("only %d bytes of logs: the test did not exercise the service", len(all))
	}
	for name, secret := range map[string]string{
		"raw private key": strings.TrimPrefix(rawKey, "0x"), "keystore key": hexutil.Encode(crypto.FromECDSA(sim.DevKeys()[1]))[2:],
		"passphrase": passphrase, "API key": adminKey, "bearer token": token, "JWT secret": jwtSecret, "database password": password,
	} {
		if strings.Contains(all, secret) {
			t.Errorf("the logs contain the %s", name)
		}
	}
}

func withPassword(t *testing.T, dsn, password string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// metricSums scrapes /metrics and sums each metric's samples over its labels.
func (s *testService) metricSums(t testing.TB) map[string]float64 {
	t.Helper()
	return s.metricSumsWhere(t, "")
}

// metricSumsWhere is metricSums over the samples whose labels hold label (as
// `result="found"`; "" for every sample).
func (s *testService) metricSumsWhere(t testing.TB, label string) map[string]float64 {
	t.Helper()
	resp, err := s.http.Get(s.httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics answered %d", resp.StatusCode)
	}
	var page bytes.Buffer
	_, _ = page.ReadFrom(resp.Body)
	samples := map[string]float64{} // metric name -> sum of its samples
	for _, line := range strings.Split(page.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// name{labels} value: label values may hold spaces, the value follows the last one.
		cut := strings.LastIndexByte(line, ' ')
		name, rest := line[:cut], line[cut+1:]
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			if label != "" && !strings.Contains(name[i:], label) {
				continue
			}
			name = name[:i]
		} else if label != "" {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest, &v); err == nil {
			samples[name] += v
		}
	}
	return samples
}
