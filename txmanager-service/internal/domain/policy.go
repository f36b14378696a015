package domain

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// ErrPolicyDenied: a spending policy of the signer or of the caller's credential refuses the
// intent; nothing was allocated.
var ErrPolicyDenied = errors.New("policy denied")

// PolicyDeniedError names the rule that refused an intent and the figures it compared; it
// matches ErrPolicyDenied.
type PolicyDeniedError struct {
	// Scope is whose policy refused: "signer 0x..." or "credential payouts".
	Scope string
	// Version is the policy's version that refused.
	Version int64
	// Rule is the rule's stable name (PolicyRule* constants).
	Rule   string
	Detail string
}

func (e *PolicyDeniedError) Error() string {
	return fmt.Sprintf("policy of %s (version %d) denies it, rule %s: %s", e.Scope, e.Version, e.Rule, e.Detail)
}

// Unwrap makes errors.Is(err, ErrPolicyDenied) hold.
func (e *PolicyDeniedError) Unwrap() error { return ErrPolicyDenied }

// The rules a policy can hold, named as refusals and metrics name them.
const (
	PolicyRuleDestination  = "destination"
	PolicyRuleSelector     = "selector"
	PolicyRuleMaxValue     = "maxValuePerTx"
	PolicyRuleMaxFeePerGas = "maxFeePerGas"
	PolicyRuleWindowValue  = "windowValue"
	PolicyRuleWindowFee    = "windowFee"
	PolicyRuleMinBalance   = "minRemainingBalance"
	// PolicyRuleApproval refuses an approved intent whose approval no longer meets what the
	// policy asks for (it changed after the approval).
	PolicyRuleApproval = "approval"
)

// PolicyScopeKind says whose a policy is.
type PolicyScopeKind string

const (
	PolicyScopeSigner     PolicyScopeKind = "signer"
	PolicyScopeCredential PolicyScopeKind = "credential"
)

// PolicyScope is whom a policy binds: one signer, or one credential on every signer it uses.
type PolicyScope struct {
	Kind PolicyScopeKind
	// ID is the signer's EIP-55 address or the credential's id.
	ID string
}

func (s PolicyScope) String() string { return string(s.Kind) + " " + s.ID }

// ParsePolicyScope validates a scope as an admin call names it.
func ParsePolicyScope(kind, id string) (PolicyScope, error) {
	switch PolicyScopeKind(kind) {
	case PolicyScopeSigner:
		addr, err := ParseAddress("scope", id)
		if err != nil {
			return PolicyScope{}, err
		}
		return PolicyScope{Kind: PolicyScopeSigner, ID: addr.Hex()}, nil
	case PolicyScopeCredential:
		if id == "" || len(id) > maxCredentialIDLength || strings.TrimSpace(id) != id {
			return PolicyScope{}, invalid("scope", "a credential id of 1 to %d characters without surrounding spaces", maxCredentialIDLength)
		}
		return PolicyScope{Kind: PolicyScopeCredential, ID: id}, nil
	default:
		return PolicyScope{}, invalid("scopeKind", "%q is not signer or credential", kind)
	}
}

// Policy limits what may be sent from a signer, or by a credential on any signer. Every
// limit is optional; an intent must pass all those present. Amounts are wei.
type Policy struct {
	// Destinations, when present (even empty), is an allowlist: only these addresses may be
	// sent to, and to each only its listed method selectors when it lists some. Contract
	// creation is never on it.
	Destinations []Destination `json:"destinations,omitempty"`
	// MaxValuePerTx bounds one transaction's value.
	MaxValuePerTx *Wei `json:"maxValuePerTx,omitempty"`
	// MaxFeePerGas bounds the most a transaction may pay per gas: its own maxFeePerGas, or
	// the service's fee cap (fees.maxFeePerGas) its replacements may reach when it names none.
	MaxFeePerGas *Wei `json:"maxFeePerGas,omitempty"`
	// Windows bound what is admitted over a rolling period, across every node.
	Windows []Window `json:"windows,omitempty"`
	// MinRemainingBalance: what the signer can spend after its unfinished transactions and
	// this one's worst case must stay at or above it.
	MinRemainingBalance *Wei `json:"minRemainingBalance,omitempty"`
	// Approval sends intents above a value, or to destinations marked approve, to wait for
	// approvers instead of being admitted at once (docs/policies.md#approvals).
	Approval *ApprovalRule `json:"approval,omitempty"`

	// hasDestinations records "destinations" present in the document, even empty.
	hasDestinations bool
}

// Destination is one allowlisted address, with the method selectors allowed to it (none:
// any call and plain transfers). Approve: what is sent to it waits for approvers.
type Destination struct {
	Address   common.Address `json:"address"`
	Selectors []Selector     `json:"selectors,omitempty"`
	Approve   bool           `json:"approve,omitempty"`
}

// ApprovalRule says which intents wait for approvers and who they are: holders of Role,
// Approvers of them, the requester never among them; an intent not approved within
// ExpiresAfter expires.
type ApprovalRule struct {
	// AboveValue: an intent sending more than this waits (nil: only destinations marked
	// approve send intents here).
	AboveValue   *Wei           `json:"aboveValue,omitempty"`
	Approvers    int            `json:"approvers"`
	Role         string         `json:"role,omitempty"`
	ExpiresAfter ApprovalExpiry `json:"expiresAfter,omitzero"`
}

// ApprovalExpiry is how long an intent waits for approvers: from 10 seconds to 31 days.
type ApprovalExpiry struct{ time.Duration }

// UnmarshalJSON reads a duration such as "30m" or "24h".
func (e *ApprovalExpiry) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("an expiry is a duration string such as \"30m\" or \"24h\"")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"30m\" or \"24h\"", s)
	}
	if d < 10*time.Second || d > maxWindowPeriod {
		return fmt.Errorf("%q must be from 10s to 744h (31 days)", s)
	}
	e.Duration = d
	return nil
}

// MarshalJSON writes the duration string.
func (e ApprovalExpiry) MarshalJSON() ([]byte, error) { return json.Marshal(e.String()) }

// DefaultApproverRole is the role an approval rule names when it names none.
const DefaultApproverRole = "approver"

// DefaultApprovalExpiry is how long an intent waits for approvers when the rule does not say.
const DefaultApprovalExpiry = 24 * time.Hour

// MaxApprovers bounds an approval rule's approvers.
const MaxApprovers = 10

// Window bounds the value and the worst-case fee (gas limit times the fee cap per gas)
// admitted over a rolling Period.
type Window struct {
	Period   Period `json:"period"`
	MaxValue *Wei   `json:"maxValue,omitempty"`
	MaxFee   *Wei   `json:"maxFee,omitempty"`
}

// Period is a window's length, whole minutes from one minute to 31 days.
type Period struct{ time.Duration }

// Wei is an amount in wei, written as a decimal string.
type Wei struct{ big.Int }

// Selector is a 4-byte method selector, written 0x + 8 hex digits.
type Selector [4]byte

// Limits of a policy document, so a document stays small enough to read in every batch.
const (
	maxPolicyBytes         = 64 << 10
	maxPolicyDestinations  = 1000
	maxSelectorsPerAddress = 64
	maxPolicyWindows       = 8
	maxCredentialIDLength  = 200
	minWindowPeriod        = time.Minute
	maxWindowPeriod        = 31 * 24 * time.Hour
	maxRoleLength          = 64
)

// maxWei is 2^256-1: no amount on an EVM chain is larger.
var maxWei = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// ParsePolicy validates a policy document. Every refusal names the field.
func ParsePolicy(raw []byte) (Policy, error) {
	var p Policy
	if len(raw) == 0 {
		return p, invalid("policy", "required")
	}
	if len(raw) > maxPolicyBytes {
		return p, invalid("policy", "%d bytes, at most %d", len(raw), maxPolicyBytes)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return Policy{}, invalid("policy", "a JSON object expected: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	// Field by field, so that a refusal names the field (and the entry) it is about.
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		value := doc[name]
		var err error
		switch name {
		case "destinations":
			p.hasDestinations = string(value) != "null"
			err = decodeList(name, value, &p.Destinations)
		case "maxValuePerTx":
			err = decodeField(name, value, &p.MaxValuePerTx)
		case "maxFeePerGas":
			err = decodeField(name, value, &p.MaxFeePerGas)
		case "minRemainingBalance":
			err = decodeField(name, value, &p.MinRemainingBalance)
		case "windows":
			err = decodeList(name, value, &p.Windows)
		case "approval":
			err = decodeField(name, value, &p.Approval)
		default:
			err = invalid(name, "not a policy rule (rules: destinations, maxValuePerTx, maxFeePerGas, windows, minRemainingBalance, approval)")
		}
		if err != nil {
			return Policy{}, err
		}
	}
	return p, p.validate()
}

func (p Policy) validate() error {
	if len(p.Destinations) > maxPolicyDestinations {
		return invalid("destinations", "%d entries, at most %d", len(p.Destinations), maxPolicyDestinations)
	}
	seen := map[common.Address]bool{}
	for i, d := range p.Destinations {
		if d.Address == (common.Address{}) {
			return invalid(fmt.Sprintf("destinations[%d].address", i), "required")
		}
		if seen[d.Address] {
			return invalid(fmt.Sprintf("destinations[%d].address", i), "%s listed twice", d.Address.Hex())
		}
		seen[d.Address] = true
		if len(d.Selectors) > maxSelectorsPerAddress {
			return invalid(fmt.Sprintf("destinations[%d].selectors", i), "%d selectors, at most %d", len(d.Selectors), maxSelectorsPerAddress)
		}
	}
	if len(p.Windows) > maxPolicyWindows {
		return invalid("windows", "%d windows, at most %d", len(p.Windows), maxPolicyWindows)
	}
	periods := map[time.Duration]bool{}
	for i, w := range p.Windows {
		if w.Period.Duration == 0 {
			return invalid(fmt.Sprintf("windows[%d].period", i), "required (e.g. 1h or 24h)")
		}
		if periods[w.Period.Duration] {
			return invalid(fmt.Sprintf("windows[%d].period", i), "%s given twice", w.Period)
		}
		periods[w.Period.Duration] = true
		if w.MaxValue == nil && w.MaxFee == nil {
			return invalid(fmt.Sprintf("windows[%d]", i), "needs maxValue, maxFee or both")
		}
	}
	if err := p.validateApproval(); err != nil {
		return err
	}
	if p.empty() {
		return invalid("policy", "names no rule (to remove a policy, delete it)")
	}
	return nil
}

func (p *Policy) validateApproval() error {
	marked := slices.IndexFunc(p.Destinations, func(d Destination) bool { return d.Approve })
	a := p.Approval
	if a == nil {
		if marked >= 0 {
			return invalid(fmt.Sprintf("destinations[%d].approve", marked), "needs an approval rule saying how many approvers (\"approval\": {\"approvers\": 2})")
		}
		return nil
	}
	if a.AboveValue == nil && marked < 0 {
		return invalid("approval", "sends nothing for approval: give aboveValue, or mark a destination approve")
	}
	if a.Approvers < 1 || a.Approvers > MaxApprovers {
		return invalid("approval.approvers", "%d; from 1 to %d distinct approvers", a.Approvers, MaxApprovers)
	}
	if a.Role == "" {
		a.Role = DefaultApproverRole
	}
	if err := ValidateRoleName("approval.role", a.Role); err != nil {
		return err
	}
	if a.ExpiresAfter.Duration == 0 {
		a.ExpiresAfter.Duration = DefaultApprovalExpiry
	}
	return nil
}

// ValidateRoleName checks a role's name: 1 to 64 lowercase letters, digits, '-' and '_'.
func ValidateRoleName(field, role string) error {
	if role == "" || len(role) > maxRoleLength {
		return invalid(field, "a role name of 1 to %d characters", maxRoleLength)
	}
	for _, r := range role {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return invalid(field, "%q: a role name is lowercase letters, digits, '-' and '_'", role)
		}
	}
	return nil
}

func (p Policy) empty() bool {
	return !p.hasDestinations && p.MaxValuePerTx == nil && p.MaxFeePerGas == nil && len(p.Windows) == 0 && p.MinRemainingBalance == nil && p.Approval == nil
}

// NeedsApproval says why an intent the other rules admit must wait for approvers ("": it
// need not).
func (p Policy) NeedsApproval(c PolicyCheck) string {
	if p.Approval == nil {
		return ""
	}
	if c.Intent.To != nil {
		if i := slices.IndexFunc(p.Destinations, func(d Destination) bool { return d.Address == *c.Intent.To }); i >= 0 && p.Destinations[i].Approve {
			return fmt.Sprintf("%s is a destination marked approve", c.Intent.To.Hex())
		}
	}
	if limit := p.Approval.AboveValue; limit != nil && valueOf(c.Intent).Cmp(&limit.Int) > 0 {
		return fmt.Sprintf("value %s wei is above the approval threshold %s wei", valueOf(c.Intent), limit.String())
	}
	return ""
}

// Windowed reports whether the policy keeps rolling totals (admission then locks its row).
func (p Policy) Windowed() bool { return len(p.Windows) > 0 }

// LongestWindow is the longest period of the policy's windows (0 without windows).
func (p Policy) LongestWindow() time.Duration {
	var longest time.Duration
	for _, w := range p.Windows {
		longest = max(longest, w.Period.Duration)
	}
	return longest
}

// JSON is the policy's canonical document (what is stored and audited).
func (p Policy) JSON() []byte {
	doc := struct {
		Destinations        *[]Destination `json:"destinations,omitempty"`
		MaxValuePerTx       *Wei           `json:"maxValuePerTx,omitempty"`
		MaxFeePerGas        *Wei           `json:"maxFeePerGas,omitempty"`
		Windows             []Window       `json:"windows,omitempty"`
		MinRemainingBalance *Wei           `json:"minRemainingBalance,omitempty"`
		Approval            *ApprovalRule  `json:"approval,omitempty"`
	}{MaxValuePerTx: p.MaxValuePerTx, MaxFeePerGas: p.MaxFeePerGas, Windows: p.Windows, MinRemainingBalance: p.MinRemainingBalance, Approval: p.Approval}
	if p.hasDestinations {
		// Present even empty: an empty allowlist denies every destination.
		destinations := p.Destinations
		if destinations == nil {
			destinations = []Destination{}
		}
		doc.Destinations = &destinations
	}
	out, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("policy marshal: %v", err)) // every field marshals
	}
	return out
}

// PolicyCheck is what a policy is checked against: one intent, with what the create path
// knows of its cost.
type PolicyCheck struct {
	Intent Intent
	// GasLimit is the effective gas limit (given or estimated).
	GasLimit uint64
	// FeeCapPerGas is the most the transaction may pay per gas: its maxFeePerGas, or the
	// service's fee cap (nil: unbounded).
	FeeCapPerGas *big.Int
	// RemainingAfter is what the signer can spend once this intent's worst case is counted
	// (nil when the funds check is off: the minimum-balance rule then refuses).
	RemainingAfter *big.Int
	// DataFeeBound is the most the chain's L1 data fee may be (nil: none counted).
	DataFeeBound *big.Int
}

// WorstFee is gas limit times the fee cap per gas, plus the bound of the L1 data fee on a
// chain that charges one (nil when the cap is unbounded): on an OP-stack chain the data fee
// of a call with much call data can be larger than its gas.
func (c PolicyCheck) WorstFee() *big.Int {
	if c.FeeCapPerGas == nil {
		return nil
	}
	fee := new(big.Int).Mul(new(big.Int).SetUint64(c.GasLimit), c.FeeCapPerGas)
	if c.DataFeeBound != nil {
		fee.Add(fee, c.DataFeeBound)
	}
	return fee
}

// CheckIntent applies the policy's per-transaction rules (everything but the windows, which
// need the totals: CheckWindows).
func (p Policy) CheckIntent(c PolicyCheck) (rule, detail string) {
	if p.hasDestinations {
		if c.Intent.To == nil {
			return PolicyRuleDestination, "contract creation is not on the destination allowlist"
		}
		i := slices.IndexFunc(p.Destinations, func(d Destination) bool { return d.Address == *c.Intent.To })
		if i < 0 {
			return PolicyRuleDestination, fmt.Sprintf("%s is not on the destination allowlist (%d addresses)", c.Intent.To.Hex(), len(p.Destinations))
		}
		if allowed := p.Destinations[i].Selectors; len(allowed) > 0 {
			if len(c.Intent.Data) < 4 {
				return PolicyRuleSelector, fmt.Sprintf("%s allows only calls to %s; the intent carries no method selector", c.Intent.To.Hex(), selectorList(allowed))
			}
			if !slices.Contains(allowed, Selector(c.Intent.Data[:4])) {
				return PolicyRuleSelector, fmt.Sprintf("method %s is not allowed to %s (allowed: %s)", Selector(c.Intent.Data[:4]), c.Intent.To.Hex(), selectorList(allowed))
			}
		}
	}
	if p.MaxValuePerTx != nil && valueOf(c.Intent).Cmp(&p.MaxValuePerTx.Int) > 0 {
		return PolicyRuleMaxValue, fmt.Sprintf("value %s wei is above the limit %s wei", valueOf(c.Intent), p.MaxValuePerTx.String())
	}
	if p.MaxFeePerGas != nil {
		if c.FeeCapPerGas == nil {
			return PolicyRuleMaxFeePerGas, fmt.Sprintf("the service has no fee cap: name a maxFeePerGas of at most %s wei", p.MaxFeePerGas.String())
		}
		if c.FeeCapPerGas.Cmp(&p.MaxFeePerGas.Int) > 0 {
			return PolicyRuleMaxFeePerGas, fmt.Sprintf("fee cap %s wei per gas is above the limit %s wei (name a lower maxFeePerGas)", c.FeeCapPerGas, p.MaxFeePerGas.String())
		}
	}
	if p.MinRemainingBalance != nil {
		if c.RemainingAfter == nil {
			return PolicyRuleMinBalance, "the signer's balance is not checked on this service (funds.check is off)"
		}
		if c.RemainingAfter.Cmp(&p.MinRemainingBalance.Int) < 0 {
			return PolicyRuleMinBalance, fmt.Sprintf("the signer would keep %s wei after this intent's worst case, under the minimum %s wei", c.RemainingAfter, p.MinRemainingBalance.String())
		}
	}
	return "", ""
}

// WindowTotals are what a window already counts.
type WindowTotals struct {
	Value *big.Int
	Fee   *big.Int
}

// CheckWindow applies one window to an intent given what the window already counts.
func (w Window) CheckWindow(c PolicyCheck, counted WindowTotals) (rule, detail string) {
	if w.MaxValue != nil {
		after := new(big.Int).Add(counted.Value, valueOf(c.Intent))
		if after.Cmp(&w.MaxValue.Int) > 0 {
			return PolicyRuleWindowValue, fmt.Sprintf("value admitted in the last %s is %s wei; with this intent's %s wei it would be %s wei, above the limit %s wei",
				w.Period, counted.Value, valueOf(c.Intent), after, w.MaxValue.String())
		}
	}
	if w.MaxFee != nil {
		worst := c.WorstFee()
		if worst == nil {
			return PolicyRuleWindowFee, "the service has no fee cap, so this intent's worst-case fee is unbounded: name a maxFeePerGas"
		}
		after := new(big.Int).Add(counted.Fee, worst)
		if after.Cmp(&w.MaxFee.Int) > 0 {
			return PolicyRuleWindowFee, fmt.Sprintf("worst-case fees admitted in the last %s are %s wei; with this intent's %s wei they would be %s wei, above the limit %s wei",
				w.Period, counted.Fee, worst, after, w.MaxFee.String())
		}
	}
	return "", ""
}

func valueOf(intent Intent) *big.Int {
	if intent.Value == nil {
		return new(big.Int)
	}
	return intent.Value
}

func selectorList(s []Selector) string {
	parts := make([]string, len(s))
	for i, sel := range s {
		parts[i] = sel.String()
	}
	return strings.Join(parts, ", ")
}

// UnmarshalJSON reads a decimal string of wei from 0 to 2^256-1.
func (w *Wei) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("an amount is a decimal string of wei, e.g. \"1000000000000000000\"")
	}
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return fmt.Errorf("%q is not a decimal number of wei", s)
	}
	if v.Sign() < 0 {
		return fmt.Errorf("%q is negative", s)
	}
	if v.Cmp(maxWei) > 0 {
		return fmt.Errorf("%q is above 2^256-1, more than any chain holds", s)
	}
	w.Set(v)
	return nil
}

// MarshalJSON writes the decimal string.
func (w Wei) MarshalJSON() ([]byte, error) { return json.Marshal(w.String()) }

// UnmarshalJSON reads a duration such as "1h" or "24h", whole minutes in [1m, 31 days].
func (p *Period) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a period is a duration string such as \"1h\" or \"24h\"")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"1h\" or \"24h\"", s)
	}
	if d < minWindowPeriod || d > maxWindowPeriod || d%time.Minute != 0 {
		return fmt.Errorf("%q must be whole minutes from 1m to 744h (31 days)", s)
	}
	p.Duration = d
	return nil
}

// MarshalJSON writes the duration string.
func (p Period) MarshalJSON() ([]byte, error) { return json.Marshal(p.Duration.String()) }

func (p Period) String() string { return p.Duration.String() }

// UnmarshalJSON reads 0x + 8 hex digits.
func (s *Selector) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err != nil {
		return errors.New("a method selector is a string of 0x and 8 hex digits, e.g. \"0xa9059cbb\"")
	}
	raw, err := hex.DecodeString(strings.TrimPrefix(text, "0x"))
	if !strings.HasPrefix(text, "0x") || err != nil || len(raw) != 4 {
		return fmt.Errorf("%q is not a method selector (0x and 8 hex digits)", text)
	}
	copy(s[:], raw)
	return nil
}

// MarshalJSON writes 0x + 8 hex digits.
func (s Selector) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

func (s Selector) String() string { return "0x" + hex.EncodeToString(s[:]) }

// UnmarshalJSON on Destination refuses an address that does not parse, naming it.
func (d *Destination) UnmarshalJSON(b []byte) error {
	var raw struct {
		Address   string     `json:"address"`
		Selectors []Selector `json:"selectors"`
		Approve   bool       `json:"approve"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return err
	}
	if raw.Address == "" {
		return errors.New("a destination needs an address")
	}
	addr, err := ParseAddress("address", raw.Address)
	if err != nil {
		return fmt.Errorf("destination %w", err)
	}
	d.Address, d.Selectors, d.Approve = addr, raw.Selectors, raw.Approve
	return nil
}

// MarshalJSON writes the address in EIP-55 form.
func (d Destination) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Address   string     `json:"address"`
		Selectors []Selector `json:"selectors,omitempty"`
		Approve   bool       `json:"approve,omitempty"`
	}{d.Address.Hex(), d.Selectors, d.Approve})
}

// decodeField decodes one field of a policy document, naming it in the refusal.
func decodeField(name string, raw json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return invalid(name, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// decodeList decodes a list field entry by entry, naming the entry in the refusal.
func decodeList[T any](name string, raw json.RawMessage, dst *[]T) error {
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return invalid(name, "a list expected")
	}
	out := make([]T, len(entries))
	for i, entry := range entries {
		if err := decodeField(fmt.Sprintf("%s[%d]", name, i), entry, &out[i]); err != nil {
			return err
		}
	}
	*dst = out
	return nil
}

// VersionedPolicy is a scope's policy as stored.
type VersionedPolicy struct {
	Scope     PolicyScope
	Version   int64
	Policy    Policy
	UpdatedAt time.Time
	UpdatedBy string
}
