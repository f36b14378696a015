package e2e

import (
	"crypto/ecdsa"
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ServiceConfig is what an e2e run sets on top of the service's embedded defaults
// (internal/conf/defaults.yaml); every other key keeps its default.
type ServiceConfig struct {
	NodeID string
	// HTTPAddr and GRPCAddr are loopback host:port; empty means 127.0.0.1:0, a port the
	// kernel picks (Service.HTTPURL and GRPCAddr report it).
	HTTPAddr string
	GRPCAddr string
	// DatabaseDSN is the database the service migrates on start and runs on.
	DatabaseDSN string
	ChainRPCURL string
	// Chains, when set, configure several chains (chains:) instead of ChainRPCURL.
	Chains []ChainTarget
	// Signers become signers.rawKeys (the environment is development, which allows them).
	Signers []*ecdsa.PrivateKey

	Confirmations        uint64
	SubmitInterval       time.Duration
	ReceiptPollInterval  time.Duration
	FinalityInterval     time.Duration
	ResubmitInterval     time.Duration
	ResubmitScanInterval time.Duration

	// Overrides sets any other key, by its dotted path ("lease.duration": "4s"), after the
	// fields above; a suite tunes what it needs without this type growing a field each time.
	Overrides map[string]any
}

// ChainTarget is one chain of a several-chain configuration: its id and endpoint.
type ChainTarget struct {
	ID     uint64
	RPCURL string
}

// FastLoops returns cfg with the pipeline paced for a devnet with one-second blocks: the
// service's defaults suit a public chain and would make a run wait mostly on timers.
func FastLoops(cfg ServiceConfig) ServiceConfig {
	cfg.Confirmations = 2
	cfg.SubmitInterval = 200 * time.Millisecond
	cfg.ReceiptPollInterval = 500 * time.Millisecond
	cfg.FinalityInterval = 500 * time.Millisecond
	cfg.ResubmitInterval = 15 * time.Second
	cfg.ResubmitScanInterval = time.Second
	return cfg
}

const configHeader = `# Written by the e2e harness (test/e2e). Only these keys differ from the service's
# embedded defaults (internal/conf/defaults.yaml); the service loads them with -conf.
`

// RenderConfig writes cfg as the YAML file the service reads with -conf.
func RenderConfig(cfg ServiceConfig) ([]byte, error) {
	rawKeys := make([]string, len(cfg.Signers))
	for i, key := range cfg.Signers {
		rawKeys[i] = KeyHex(key)
	}
	doc := map[string]any{
		"environment": "development",
		"node":        map[string]any{"id": cfg.NodeID},
		"server": map[string]any{
			"http": map[string]any{"addr": cfg.HTTPAddr},
			"grpc": map[string]any{"addr": cfg.GRPCAddr},
		},
		"database": map[string]any{"dsn": cfg.DatabaseDSN, "migrateOnStart": true},
		"chain":    map[string]any{"rpcUrl": cfg.ChainRPCURL},
		"signers":  map[string]any{"rawKeys": rawKeys},
	}
	if len(cfg.Chains) > 0 {
		chains := make([]any, len(cfg.Chains))
		for i, c := range cfg.Chains {
			chains[i] = map[string]any{"id": c.ID, "rpcUrl": c.RPCURL}
		}
		doc["chains"] = chains
	}
	optional := []struct {
		path  string
		value any
		set   bool
	}{
		{"confirmations.required", cfg.Confirmations, cfg.Confirmations > 0},
		{"pipeline.submitInterval", cfg.SubmitInterval.String(), cfg.SubmitInterval > 0},
		{"pipeline.receipts.pollInterval", cfg.ReceiptPollInterval.String(), cfg.ReceiptPollInterval > 0},
		{"pipeline.finalityInterval", cfg.FinalityInterval.String(), cfg.FinalityInterval > 0},
		{"resubmit.interval", cfg.ResubmitInterval.String(), cfg.ResubmitInterval > 0},
		{"resubmit.scanInterval", cfg.ResubmitScanInterval.String(), cfg.ResubmitScanInterval > 0},
	}
	for _, o := range optional {
		if o.set {
			if err := setPath(doc, o.path, o.value); err != nil {
				return nil, err
			}
		}
	}
	for path, value := range cfg.Overrides {
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		if err := setPath(doc, path, value); err != nil {
			return nil, err
		}
	}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("render service config: %w", err)
	}
	return append([]byte(configHeader), body...), nil
}

// setPath sets doc[a][b][c] = value for path "a.b.c", creating the maps on the way.
func setPath(doc map[string]any, path string, value any) error {
	parts := strings.Split(path, ".")
	node := doc
	for i, part := range parts {
		if part == "" {
			return fmt.Errorf("config key %q: empty segment", path)
		}
		if i == len(parts)-1 {
			node[part] = value
			return nil
		}
		next, exists := node[part]
		if !exists {
			child := map[string]any{}
			node[part] = child
			node = child
			continue
		}
		child, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("config key %q: %s is a value, not a section", path, strings.Join(parts[:i+1], "."))
		}
		node = child
	}
	return nil
}
