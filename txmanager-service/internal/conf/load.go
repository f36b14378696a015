package conf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

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
		sources = append(sources, embeddedSource{key: path, body: body})
	}
	sources = append(sources, environmentSource{})
	c := config.New(config.WithSource(sources...), config.WithMergeFunc(overlay))
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
		return nil, fmt.Errorf("parse config: %w", scanError(err))
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
		"CONSOLE_SESSION_SECRET_FILE",
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
// file, key its path) to Kratos config.
type embeddedSource struct {
	key  string
	body []byte
}

// Load hands Kratos only a document checkYAML passed. Kratos returns a source's own error
// as it is, but logs the whole document, values and all, when it fails to decode one.
func (s embeddedSource) Load() ([]*config.KeyValue, error) {
	if err := checkYAML(s.key, s.body); err != nil {
		return nil, err
	}
	return []*config.KeyValue{{Key: s.key, Value: s.body, Format: "yaml"}}, nil
}

func (embeddedSource) Watch() (config.Watcher, error) { return noWatch{make(chan struct{})}, nil }

// overlay lays a source's tree over the ones before it: sections merge key by key, and any
// other value (a list included) replaces the one before. That is what Kratos' own merge
// (mergo with override) does to these trees, but Kratos logs the whole source, values and
// all, when its merge fails: this one has no way to fail.
func overlay(dst, src any) error {
	overlayTree(*dst.(*map[string]any), src.(map[string]any))
	return nil
}

func overlayTree(dst, src map[string]any) {
	for key, value := range src {
		if section, ok := value.(map[string]any); ok {
			if under, ok := dst[key].(map[string]any); ok {
				overlayTree(under, section)
				continue
			}
		}
		dst[key] = value
	}
}

// scanError is a decoding error without the value: encoding/json's type errors quote a
// number they could not fit. checkKeys has refused those with their key before Scan; this
// keeps a missed one out of the log all the same.
func scanError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Errorf("%s: must be %s", typeErr.Field, describeType(typeErr.Type))
	}
	return err
}

type noWatch struct{ stop chan struct{} }

func (w noWatch) Next() ([]*config.KeyValue, error) { <-w.stop; return nil, context.Canceled }
func (w noWatch) Stop() error                       { close(w.stop); return nil }
