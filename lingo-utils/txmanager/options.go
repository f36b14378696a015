package txmanager

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// TxOptions describes one transaction. Zero fields take the manager's defaults (Config).
type TxOptions struct {
	// Isolation level; empty means Config.DefaultIsolation.
	Isolation pgx.TxIsoLevel
	// AccessMode; empty means read-write. WithinReadOnlyTx always forces read-only.
	AccessMode pgx.TxAccessMode
	// Timeout bounds each attempt; 0 means Config.DefaultTimeout, negative means none. A
	// shorter deadline already on the caller's context wins.
	Timeout time.Duration
	// LockTimeout is applied with SET LOCAL lock_timeout; 0 means Config.LockTimeout,
	// negative means the server's setting.
	LockTimeout time.Duration
	// TraceName names the use case in spans, metrics and logs (e.g. "orders.create").
	TraceName string
	// MaxRetries is how many times the whole callback may be re-run after a retryable
	// failure. 0 disables retries: only idempotent callbacks should opt in.
	MaxRetries int
	// Settings are run-time parameters for this transaction alone (SET LOCAL), sent with
	// BEGIN: {"plan_cache_mode", "force_generic_plan"}, say, for statements written to
	// keep one plan whatever their arguments.
	Settings []Setting
}

// Setting is one run-time parameter of a transaction: SET LOCAL Name = 'Value'.
type Setting struct {
	Name, Value string
}

// DefaultOptions is a read-committed read-write transaction without retries.
func DefaultOptions() TxOptions {
	return TxOptions{Isolation: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}
}

// SerializableOptions is a serializable read-write transaction that retries serialization
// failures up to three times, as serializable transactions are expected to.
func SerializableOptions() TxOptions {
	return TxOptions{Isolation: pgx.Serializable, AccessMode: pgx.ReadWrite, MaxRetries: 3}
}

// ReadOnlyOptions is a read-committed read-only transaction.
func ReadOnlyOptions() TxOptions {
	return TxOptions{Isolation: pgx.ReadCommitted, AccessMode: pgx.ReadOnly}
}

// WithTraceName returns a copy of o named name.
func (o TxOptions) WithTraceName(name string) TxOptions { o.TraceName = name; return o }

// WithRetries returns a copy of o that retries up to n times.
func (o TxOptions) WithRetries(n int) TxOptions { o.MaxRetries = n; return o }

// WithTimeout returns a copy of o with a per-attempt timeout.
func (o TxOptions) WithTimeout(d time.Duration) TxOptions { o.Timeout = d; return o }

// WithSettings returns a copy of o with settings added.
func (o TxOptions) WithSettings(settings ...Setting) TxOptions {
	o.Settings = append(slices.Clip(o.Settings), settings...)
	return o
}

// WithLockTimeout returns a copy of o with a lock timeout.
func (o TxOptions) WithLockTimeout(d time.Duration) TxOptions { o.LockTimeout = d; return o }

// ParseIsolation maps configuration spellings (read_committed, "repeatable read",
// SERIALIZABLE, ...) to a pgx isolation level.
func ParseIsolation(s string) (pgx.TxIsoLevel, error) {
	switch strings.NewReplacer("_", " ", "-", " ").Replace(strings.ToLower(strings.TrimSpace(s))) {
	case "", "read committed":
		return pgx.ReadCommitted, nil
	case "repeatable read":
		return pgx.RepeatableRead, nil
	case "serializable":
		return pgx.Serializable, nil
	case "read uncommitted":
		return pgx.ReadUncommitted, nil
	default:
		return "", fmt.Errorf("txmanager: unknown isolation level %q", s)
	}
}

// resolved is TxOptions with every default applied.
type resolved struct {
	isolation   pgx.TxIsoLevel
	accessMode  pgx.TxAccessMode
	timeout     time.Duration
	lockTimeout time.Duration
	idleTimeout time.Duration
	traceName   string
	maxRetries  int
	settings    []Setting
}

func (m *manager) resolve(o TxOptions, readOnly bool) resolved {
	r := resolved{
		isolation:   o.Isolation,
		accessMode:  o.AccessMode,
		timeout:     o.Timeout,
		lockTimeout: o.LockTimeout,
		traceName:   o.TraceName,
		maxRetries:  max(o.MaxRetries, 0),
		settings:    o.Settings,
	}
	if r.isolation == "" {
		r.isolation = m.cfg.isolation
	}
	if r.accessMode == "" {
		r.accessMode = pgx.ReadWrite
	}
	if readOnly {
		r.accessMode = pgx.ReadOnly
	}
	if r.timeout == 0 {
		r.timeout = m.cfg.DefaultTimeout
	}
	if r.lockTimeout == 0 {
		r.lockTimeout = m.cfg.LockTimeout
	}
	r.idleTimeout = m.cfg.IdleInTransactionTimeout
	if r.traceName == "" {
		r.traceName = "unnamed"
	}
	return r
}

// beginStatements are what opens a transaction: BEGIN with its isolation level and access
// mode, then its timeouts.
type beginStatements struct {
	// query is all of them in one string: pgx sends an argument-less Exec over the simple
	// protocol, which accepts several statements, so BEGIN costs one round trip.
	query string
	// settings are the SET LOCAL statements alone, queued after BEGIN in a pipeline, whose
	// extended protocol takes one statement per query.
	settings []string
}

type beginKey struct {
	isolation         pgx.TxIsoLevel
	accessMode        pgx.TxAccessMode
	lockTimeout, idle time.Duration
}

// beginFor returns r's begin statements, made once per combination of options: a
// transaction would otherwise format them on every call. A transaction with settings of its
// own has them formatted each time, which costs what a cache key made of them would.
func (m *manager) beginFor(r resolved) beginStatements {
	if len(r.settings) > 0 {
		return r.beginStatements()
	}
	key := beginKey{isolation: r.isolation, accessMode: r.accessMode, lockTimeout: r.lockTimeout, idle: r.idleTimeout}
	if b, ok := m.begins.Load(key); ok {
		return b.(beginStatements)
	}
	b := r.beginStatements()
	m.begins.Store(key, b)
	return b
}

func (r resolved) beginStatements() beginStatements {
	var b beginStatements
	if r.lockTimeout > 0 {
		b.settings = append(b.settings, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(r.lockTimeout.Milliseconds(), 1)))
	}
	if r.idleTimeout > 0 {
		b.settings = append(b.settings, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", max(r.idleTimeout.Milliseconds(), 1)))
	}
	for _, s := range r.settings {
		b.settings = append(b.settings, "SET LOCAL "+s.Name+" = "+quoteLiteral(s.Value))
	}
	b.query = strings.Join(append([]string{"BEGIN ISOLATION LEVEL " + strings.ToUpper(string(r.isolation)) + " " + strings.ToUpper(string(r.accessMode))}, b.settings...), "; ")
	return b
}

// quoteLiteral quotes v as a string constant whatever the server's
// standard_conforming_strings: with it off, a backslash in a plain '...' constant escapes
// the quote after it, so a value holding one is written as an escape string (E'...'), where
// backslashes are always escapes.
func quoteLiteral(v string) string {
	quoted := "'" + strings.ReplaceAll(v, "'", "''") + "'"
	if strings.Contains(v, `\`) {
		quoted = "E'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", "''") + "'"
	}
	return quoted
}

// checkSettings refuses a setting whose name is not a parameter's (it goes into the SQL as
// it is), and one that would change what the options say the transaction is: a read-only
// transaction made writable, another isolation than the one its spans and metrics report.
// Those are the options' to set (WithIsolation, ReadOnlyOptions).
func (r resolved) checkSettings() error {
	for _, s := range r.settings {
		if !isParameterName(s.Name) {
			return fmt.Errorf("txmanager: setting %q is not a run-time parameter's name", s.Name)
		}
		if transactionMode[strings.ToLower(s.Name)] {
			return fmt.Errorf("txmanager: setting %q would change the transaction's isolation or access mode; set them with the options (Isolation, AccessMode, ReadOnlyOptions)", s.Name)
		}
	}
	return nil
}

// transactionMode are the parameters that set a transaction's isolation, access mode and
// deferrability, for this transaction or as the default of the next.
var transactionMode = map[string]bool{
	"transaction_isolation": true, "transaction_read_only": true, "transaction_deferrable": true,
	"default_transaction_isolation": true, "default_transaction_read_only": true, "default_transaction_deferrable": true,
}

func isParameterName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		letter := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c != '.' && (c < '0' || c > '9')) {
			return false
		}
	}
	return true
}
