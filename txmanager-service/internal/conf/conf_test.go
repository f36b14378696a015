package conf_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

func TestLoadEmbeddedDefaults(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	bc, err := conf.Load("")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if bc.Lease.Duration.Std() != 10*time.Second || bc.Lease.RenewInterval.Std() != 3*time.Second || bc.Lease.ClockSkew.Std() != time.Second {
		t.Errorf("lease defaults = %+v, want 10s/3s/1s", bc.Lease)
	}
	if bc.Server.HTTP.Addr != "127.0.0.1:8080" || bc.Routing.Mode != conf.RoutingBasic || !bc.Nonce.ChainQuery.Enabled {
		t.Errorf("unexpected defaults: %+v", bc)
	}
	if !strings.HasSuffix(bc.Node.ID, ":9090") {
		t.Errorf("node id = %q, want hostname:9090", bc.Node.ID)
	}
}

func TestLoadFileAndEnvironmentOverrides(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("writer:\n  workers: 3\nlease:\n  duration: 20s\nnonce:\n  chainQuery:\n    enabled: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://example/db")
	t.Setenv("NODE_ID", "node-a")
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if bc.Writer.Workers != 3 || bc.Lease.Duration.Std() != 20*time.Second || bc.Nonce.ChainQuery.Enabled {
		t.Errorf("file overrides not applied: writer=%+v lease=%+v nonce=%+v", bc.Writer, bc.Lease, bc.Nonce)
	}
	if bc.Writer.BatchSize != 256 {
		t.Errorf("a default the file does not mention was lost: batchSize=%d", bc.Writer.BatchSize)
	}
	if bc.Database.DSN != "postgres://example/db" || bc.Node.ID != "node-a" {
		t.Errorf("environment overrides not applied: dsn=%q node=%q", bc.Database.DSN, bc.Node.ID)
	}
}

func TestCheckRejectsBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"renew too slow", "lease:\n  renewInterval: 6s\n", "lease.renewInterval"},
		{"bad mode", "routing:\n  mode: random\n", "routing.mode"},
		{"no workers", "writer:\n  workers: 0\n", "writer.workers"},
		{"bad exec mode", "database:\n  queryExecMode: turbo\n", "queryExecMode"},
		{"negative pool", "database:\n  maxConns: -1\n", "database.maxConns: must be 0 (sized by the cores) or positive"},
		{"bad duration", "lease:\n  duration: soon\n", "lease.duration: must be a duration"},
		// The chains list is checked entry by entry, each problem naming its chain.
		{"chain entry without id", "chains:\n  - rpcUrl: http://a.example\n", "chains[0].id: must be set"},
		{"chain id twice", "chains:\n  - {id: 5, rpcUrl: http://a.example}\n  - {id: 5, rpcUrl: http://b.example}\n", "chains[1].id: is listed twice (as chains[0].id too)"},
		{"bad fee cap on one chain", "chains:\n  - {id: 5, rpcUrl: http://a.example, fees: {maxFeePerGas: \"-1\", bumpPercent: 10}}\n", "chains[0].fees.maxFeePerGas: must be a positive number of wei"},
		{"no confirmations on one chain", "chains:\n  - {id: 5, rpcUrl: http://a.example, confirmations: {required: 0}}\n", "chains[0].confirmations.required: must be positive"},
		{"negative block time", "chains:\n  - {id: 5, rpcUrl: http://a.example, blockTime: -1s}\n", "chains[0].blockTime: must not be negative"},
		{"production chain without endpoints", "environment: production\nchains:\n  - {id: 5}\n", "chains[0].rpcUrl is empty"},
		// Every problem starts with the key to change.
		{"endpoint that is not JSON-RPC", "chain:\n  rpcUrl: ftp://node.example\n", "chain.rpcUrl: is not a JSON-RPC URL"},
		{"endpoint in a list", "chain:\n  rpcUrls: [http://a.example, \"node.example:8545\"]\n", "chain.rpcUrls[1]: is not a JSON-RPC URL"},
		{"endpoint of a chain entry", "chains:\n  - {id: 5, rpcUrl: \"http://a.example,gopher://b\"}\n", "chains[0].rpcUrl (URL 2 of 2): is not a JSON-RPC URL"},
		{"retention", "retention:\n  batchSize: 0\n", "retention.batchSize: must be in 1..10000"},
		{"retention shorter than a webhook's dying", "retention:\n  horizon: 12h\n", "retention.horizon: must be 0 (keep everything) or at least an hour above webhooks.deadAfter (24h0m0s)"},
		{"resubmit", "resubmit:\n  batchSize: 0\n", "resubmit.batchSize: must be in 1..10000"},
		{"feed", "feed:\n  pollInterval: 0s\n", "feed.pollInterval: must be positive"},
		{"receipts batch", "pipeline:\n  receipts:\n    batchSize: 5000\n", "pipeline.receipts.batchSize: must be in 1..1000"},
		{"chain timeout", "chain:\n  timeouts:\n    send: 0s\n", "chain.timeouts.send: must be positive"},
		{"listen without auth", "server:\n  grpc:\n    addr: 0.0.0.0:9090\n", "server.grpc.addr: refusing to listen beyond loopback without authentication"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := conf.Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}

func TestMissingConfigFileIsAnError(t *testing.T) {
	if _, err := conf.Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil {
		t.Fatal("a missing -conf file was accepted")
	}
}

func TestUseBoundPortsKeepsHostsAndMovesADerivedNodeID(t *testing.T) {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	tests := []struct {
		name               string
		httpAddr, grpcAddr string
		nodeID             string // empty: the id Load derives from the gRPC address
		httpPort, grpcPort int    // what the kernel bound
		wantHTTP, wantGRPC string
		wantNodeID         string
	}{
		{"port 0", "127.0.0.1:0", "127.0.0.1:0", "", 41001, 41002, "127.0.0.1:41001", "127.0.0.1:41002", host + ":41002"},
		{"fixed ports", "127.0.0.1:8080", "127.0.0.1:9090", "", 8080, 9090, "127.0.0.1:8080", "127.0.0.1:9090", host + ":9090"},
		{"IPv6 loopback", "[::1]:0", "[::1]:0", "", 41001, 41002, "[::1]:41001", "[::1]:41002", host + ":41002"},
		{"configured node id", "127.0.0.1:0", "127.0.0.1:0", "node-a", 41001, 41002, "127.0.0.1:41001", "127.0.0.1:41002", "node-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HTTP_ADDR", tc.httpAddr)
			t.Setenv("GRPC_ADDR", tc.grpcAddr)
			t.Setenv("NODE_ID", tc.nodeID)
			bc, err := conf.Load("")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := bc.UseBoundPorts(tc.httpPort, tc.grpcPort); err != nil {
				t.Fatalf("UseBoundPorts: %v", err)
			}
			if bc.Server.HTTP.Addr != tc.wantHTTP || bc.Server.GRPC.Addr != tc.wantGRPC || bc.Node.ID != tc.wantNodeID {
				t.Errorf("got http %q grpc %q node %q, want %q %q %q",
					bc.Server.HTTP.Addr, bc.Server.GRPC.Addr, bc.Node.ID, tc.wantHTTP, tc.wantGRPC, tc.wantNodeID)
			}
		})
	}
}

// A production instance refuses each development convenience, naming the key to change.
func TestProductionRefusesDevelopmentSettings(t *testing.T) {
	// valid is a production configuration that passes; each case breaks one thing.
	const valid = `environment: production
database:
  dsn: postgres://u@db/txm
  localDatabase: false
chain:
  rpcUrl: https://rpc.example.com
routing:
  mode: forward
  advertiseGrpcAddr: 10.0.0.5:9090
  peerTLS: {caFile: /tls/ca.crt, certFile: /tls/node.crt, keyFile: /tls/node.key}
server:
  http: {addr: "0.0.0.0:8080"}
  grpc: {addr: "0.0.0.0:9090"}
  tls: {certFile: /tls/server.crt, keyFile: /tls/server.key}
auth:
  enabled: true
  jwt: {issuer: "https://auth.example.com/", audience: txmanager, hmacSecretFile: /secrets/jwt}
`
	tests := []struct {
		name     string
		override string // YAML merged over valid
		env      map[string]string
		want     string // "" means the configuration is accepted
	}{
		{name: "valid", want: ""},
		{name: "no chain RPC URL", override: "chain:\n  rpcUrl: \"\"\n", want: "chain.rpcUrl is empty: in production set CHAIN_RPC_URL"},
		{name: "local database", override: "database:\n  localDatabase: true\n", want: "database.localDatabase is true"},
		{name: "raw keys", override: "signers:\n  rawKeys: [\"0x01\"]\n", want: "signers.rawKeys: raw keys are for development only"},
		{name: "a keystore kept for the roster", override: "signers:\n  keystore: {dir: /keys, rosterOnly: true, passphraseFile: /secrets/pass}\n", want: ""},
		{name: "a keystore kept for the roster naming accounts", override: "signers:\n  keystore: {dir: /keys, rosterOnly: true, addresses: [\"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"]}\n",
			want: "signers.keystore.addresses: must be empty with signers.keystore.rosterOnly"},
		{name: "a keystore kept for the roster without a directory", override: "signers:\n  keystore: {rosterOnly: true}\n", want: "signers.keystore.dir: required with signers.keystore.rosterOnly"},
		{name: "wildcard advertise address", override: "routing:\n  advertiseGrpcAddr: 0.0.0.0:9090\n", want: "routing.advertiseGrpcAddr: peers would forward to an address that names no host they can reach"},
		{name: "advertise defaults to a wildcard listen address", override: "routing:\n  advertiseGrpcAddr: \"\"\n", want: "routing.advertiseGrpcAddr: peers would forward to an address that names no host they can reach"},
		{name: "IPv6 wildcard advertise address", override: "routing:\n  advertiseGrpcAddr: \"[::]:9090\"\n", want: "routing.advertiseGrpcAddr"},
		{name: "loopback advertise address", override: "routing:\n  advertiseGrpcAddr: 127.0.0.1:9090\n", want: "routing.advertiseGrpcAddr"},
		{name: "wildcard advertise address is fine in basic mode", override: "routing:\n  mode: basic\n  advertiseGrpcAddr: \"\"\n", want: ""},
		{name: "forward mode without peer TLS", override: "routing:\n  peerTLS: {caFile: \"\", certFile: \"\", keyFile: \"\"}\n", want: "routing.peerTLS is not set"},
		{name: "peer TLS without server TLS", override: "server:\n  tls: {certFile: \"\", keyFile: \"\"}\n", want: "server.tls: routing.peerTLS needs it"},
		{name: "JWT without issuer", override: "auth:\n  jwt: {issuer: \"\"}\n", want: "auth.jwt.issuer and auth.jwt.audience must both be set in production"},
		{name: "JWT without audience", override: "auth:\n  jwt: {audience: \"\"}\n", want: "auth.jwt.issuer and auth.jwt.audience must both be set in production"},
		{name: "environment variable empties the chain", env: map[string]string{"CHAIN_RPC_URL": ""}, override: "chain:\n  rpcUrl: \"${CHAIN_RPC_URL:}\"\n", want: "chain.rpcUrl is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "config.yaml")
			merged := valid
			if tc.override != "" {
				merged = mergeYAML(t, valid, tc.override)
			}
			if err := os.WriteFile(base, []byte(merged), 0o600); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := conf.Load(base)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid production configuration refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The same settings are fine in development.
func TestDevelopmentAllowsLocalConveniences(t *testing.T) {
	t.Setenv("CHAIN_RPC_URL", "")
	t.Setenv("DATABASE_URL", "")
	bc, err := conf.Load("")
	if err != nil {
		t.Fatalf("development defaults refused: %v", err)
	}
	if bc.Chain.RPCURL != "" || !bc.Database.LocalDatabase {
		t.Fatalf("defaults changed: rpcUrl %q localDatabase %v", bc.Chain.RPCURL, bc.Database.LocalDatabase)
	}
}

// mergeYAML lays override over base, key by key (maps merge, everything else replaces).
func mergeYAML(t *testing.T, base, override string) string {
	t.Helper()
	var b, o map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(override), &o); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(mergeMaps(b, o))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mergeMaps(base, override map[string]any) map[string]any {
	for k, v := range override {
		if sub, ok := v.(map[string]any); ok {
			if baseSub, ok := base[k].(map[string]any); ok {
				base[k] = mergeMaps(baseSub, sub)
				continue
			}
		}
		base[k] = v
	}
	return base
}

// A pool sized by the cores grows 4 connections a core between 8 and 32; a configured size
// is kept whatever the cores.
func TestPoolSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		maxConns int32
		cores    int
		want     int32
	}{
		{"one core gets the floor", 0, 1, 8},
		{"two cores", 0, 2, 8},
		{"three cores", 0, 3, 12},
		{"four cores", 0, 4, 16},
		{"eight cores reach the ceiling", 0, 8, 32},
		{"sixty-four cores stay at the ceiling", 0, 64, 32},
		{"configured below the floor", 3, 2, 3},
		{"configured above the ceiling", 100, 2, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (conf.Database{MaxConns: tt.maxConns}).PoolSize(tt.cores); got != tt.want {
				t.Errorf("PoolSize(%d) with maxConns %d = %d, want %d", tt.cores, tt.maxConns, got, tt.want)
			}
		})
	}
}

// Every ${NAME} the defaults refer to is read from the environment: a variable the defaults
// name but the loader does not list is silently ignored (as the console's session secret
// file was, so every node sealed sessions with a secret of its own).
func TestEveryVariableTheDefaultsNameIsRead(t *testing.T) {
	defaults, err := os.ReadFile("defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, name := range conf.EnvironmentVariables() {
		listed[name] = true
	}
	var settings []string // the defaults without their comments
	for _, line := range strings.Split(string(defaults), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			settings = append(settings, line)
		}
	}
	named := regexp.MustCompile(`\$\{([A-Z0-9_]+)[:}]`).FindAllStringSubmatch(strings.Join(settings, "\n"), -1)
	if len(named) == 0 {
		t.Fatal("the defaults name no variable: the pattern is wrong")
	}
	for _, m := range named {
		if !listed[m[1]] {
			t.Errorf("defaults.yaml names ${%s}, which the loader does not read", m[1])
		}
	}
	secret := filepath.Join(t.TempDir(), "session-secret")
	t.Setenv("DATABASE_URL", "")
	t.Setenv("CONSOLE_SESSION_SECRET_FILE", secret)
	bc, err := conf.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if bc.Console.SessionSecretFile != secret {
		t.Errorf("console.sessionSecretFile = %q, want %q from the environment", bc.Console.SessionSecretFile, secret)
	}
}
