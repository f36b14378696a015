package conf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-kratos/kratos/v2/config"
)

// Load reads the embedded defaults, then path (if not empty), then the environment.
func Load(path string) (*Bootstrap, error) {
	sources := []config.Source{embeddedSource{key: "defaults.yaml", body: defaultsYAML}}
	if path != "" {
		// Read once, not through Kratos' file source: configuration is loaded at start-up
		// only, and the file source would start a filesystem watcher for nothing.
		body, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		sources = append(sources, embeddedSource{key: filepath.Base(path), body: body})
	}
	sources = append(sources, environmentSource{})
	c := config.New(config.WithSource(sources...))
	defer func() { _ = c.Close() }() // only stops the sources' no-op watchers
	if err := c.Load(); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	// Strict first: a misspelled key would otherwise leave its setting at the default
	// without a word, and a value of the wrong shape would fail without naming its key.
	var tree map[string]any
	if err := c.Scan(&tree); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if err := checkKeys(tree); err != nil {
		return nil, err
	}
	var bc Bootstrap
	if err := c.Scan(&bc); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if bc.Node.ID == "" {
		bc.Node.ID = defaultNodeID(bc.Server.GRPC.Addr)
	}
	if err := bc.Check(); err != nil {
		return nil, err
	}
	return &bc, nil
}

// EnvironmentVariables are the variables the defaults refer to as ${NAME}; only these are
// read, so the rest of the environment never enters the configuration (or its logs).
func EnvironmentVariables() []string {
	return []string{
		"TXM_ENVIRONMENT", "NODE_ID", "HTTP_ADDR", "GRPC_ADDR", "DATABASE_URL", "DATABASE_MIGRATION_URL",
		"CHAIN_RPC_URL", "EMBEDDED_CHAIN_HTTP_ADDR", "ROUTING_MODE", "ADVERTISE_GRPC_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT",
	}
}

type environmentSource struct{}

func (environmentSource) Load() ([]*config.KeyValue, error) {
	var kvs []*config.KeyValue
	for _, name := range EnvironmentVariables() {
		if v, ok := os.LookupEnv(name); ok {
			kvs = append(kvs, &config.KeyValue{Key: name, Value: []byte(v)})
		}
	}
	return kvs, nil
}

func (environmentSource) Watch() (config.Watcher, error) { return noWatch{make(chan struct{})}, nil }

// embeddedSource feeds a YAML document held in memory (the embedded defaults, the -conf
// file) to Kratos config.
type embeddedSource struct {
	key  string
	body []byte
}

func (s embeddedSource) Load() ([]*config.KeyValue, error) {
	return []*config.KeyValue{{Key: s.key, Value: s.body, Format: "yaml"}}, nil
}

func (embeddedSource) Watch() (config.Watcher, error) { return noWatch{make(chan struct{})}, nil }

type noWatch struct{ stop chan struct{} }

func (w noWatch) Next() ([]*config.KeyValue, error) { <-w.stop; return nil, context.Canceled }
func (w noWatch) Stop() error                       { close(w.stop); return nil }
