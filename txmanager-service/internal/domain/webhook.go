package domain

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
)

// ErrDestinationForbidden: a webhook URL points where the network policy forbids (loopback,
// link-local, cloud metadata, private ranges outside development).
var ErrDestinationForbidden = errors.New("destination forbidden")

// SubscriptionState is whether a subscription is delivered.
type SubscriptionState string

const (
	SubscriptionActive SubscriptionState = "active"
	SubscriptionPaused SubscriptionState = "paused"
	// SubscriptionDead: deliveries failed for longer than webhooks.deadAfter; an operator
	// resumes it (from its cursor, or replays from another).
	SubscriptionDead SubscriptionState = "dead"
)

// Event kinds a subscription can ask for.
const (
	EventCompletion = "completion"
	// EventBalanceLow: a signer's balance fell under its low-water mark; EventBalanceRecovered:
	// it is back at its high-water mark.
	EventBalanceLow       = "signer.balance_low"
	EventBalanceRecovered = "signer.balance_recovered"
	// EventRefillSent: the treasury was asked to send a low signer up to its high-water mark.
	EventRefillSent = "signer.refill_sent"
	// EventApprovalRequested: a policy sent an intent to wait for approvers.
	EventApprovalRequested = "approval.requested"
	// EventQuarantined: the chain holds nonces of a signer the database does not know; it
	// takes no new transaction until its recovery (EventRecovered) or an operator releases it.
	EventQuarantined = "signer.quarantined"
	EventRecovered   = "signer.recovered"
	// EventSigningFailing: a signer's key source stopped signing; EventSigningResumed: it
	// signs again.
	EventSigningFailing = "signer.signing_failing"
	EventSigningResumed = "signer.signing_resumed"
	// EventStuck: a head-of-line transaction was marked STUCK and waits for an operator.
	EventStuck = "tx.stuck"
)

// Subscription is a receiver of pushed events: where, what, and how far it has been sent.
type Subscription struct {
	ID     uuid.UUID
	URL    string
	Filter SubscriptionFilter
	State  SubscriptionState
	// Cursor is the feed position of the last event delivered (acknowledged with a 2xx).
	Cursor        int64
	CreatedAt     time.Time
	CreatedBy     string
	LastSuccessAt *time.Time
	// FailingSince is when the current run of failed deliveries began (nil: none failing).
	FailingSince *time.Time
	LastError    string
	Description  string
	// Delivered counts events acknowledged; Owner is the node delivering it now ("": none).
	Delivered int64
	Owner     string
	// BatchSize is the most events one delivery carries; 1 sends each event alone.
	BatchSize int
}

// SubscriptionFilter selects the events a subscription receives; an empty list means all.
type SubscriptionFilter struct {
	Chains  []uint64         `json:"chains,omitempty"`
	Signers []common.Address `json:"signers,omitempty"`
	// States: final states of completions (CONFIRMED, FAILED_FINAL, EXPIRED, REJECTED, REFUSED).
	States []string `json:"states,omitempty"`
	Kinds  []string `json:"kinds,omitempty"`
}

// Limits of a subscription, so a hostile one cannot weigh on every delivery.
const (
	maxWebhookURLLength = 2048
	minWebhookSecret    = 16
	maxWebhookSecret    = 256
	maxFilterEntries    = 100
	maxDescription      = 200
	// MaxWebhookBatch bounds a batch to a body of a few hundred KB (the deliverer reads the
	// feed in pages of this size).
	MaxWebhookBatch = 100
)

var finalStates = []string{string(StateConfirmed), string(StateFailedFinal), string(StateExpired), string(StateRejected), string(StateRefused)}

var eventKinds = []string{EventCompletion, EventBalanceLow, EventBalanceRecovered, EventRefillSent, EventApprovalRequested, EventQuarantined, EventRecovered,
	EventSigningFailing, EventSigningResumed, EventStuck}

// ParseSubscriptionFilter validates a filter, naming the field it refuses.
func ParseSubscriptionFilter(chains []uint64, signers, states, kinds []string) (SubscriptionFilter, error) {
	var f SubscriptionFilter
	for _, list := range []struct {
		name string
		n    int
	}{{"filter.chains", len(chains)}, {"filter.signers", len(signers)}, {"filter.states", len(states)}, {"filter.kinds", len(kinds)}} {
		if list.n > maxFilterEntries {
			return f, invalid(list.name, "%d entries, at most %d", list.n, maxFilterEntries)
		}
	}
	for _, c := range chains {
		if c == 0 {
			return f, invalid("filter.chains", "a chain id is positive")
		}
	}
	f.Chains = chains
	for i, s := range signers {
		addr, err := ParseAddress(fmt.Sprintf("filter.signers[%d]", i), s)
		if err != nil {
			return f, err
		}
		f.Signers = append(f.Signers, addr)
	}
	for _, s := range states {
		if !slices.Contains(finalStates, s) {
			return f, invalid("filter.states", "%q is not a final state (%s)", s, strings.Join(finalStates, ", "))
		}
	}
	f.States = states
	for _, k := range kinds {
		if !slices.Contains(eventKinds, k) {
			return f, invalid("filter.kinds", "%q is not an event kind (%s)", k, strings.Join(eventKinds, ", "))
		}
	}
	f.Kinds = kinds
	return f, nil
}

// Matches reports whether an event of kind about signer on chain passes the filter; state
// is a completion's final state (the states filter applies to completions alone).
func (f SubscriptionFilter) Matches(kind string, chainID uint64, signer common.Address, state string) bool {
	return (len(f.Kinds) == 0 || slices.Contains(f.Kinds, kind)) &&
		(len(f.Chains) == 0 || slices.Contains(f.Chains, chainID)) &&
		(len(f.Signers) == 0 || slices.Contains(f.Signers, signer)) &&
		(kind != EventCompletion || len(f.States) == 0 || slices.Contains(f.States, state))
}

// ParseWebhookSecret validates a signing secret: 16 to 256 bytes of printable ASCII.
func ParseWebhookSecret(secret string) error {
	if len(secret) < minWebhookSecret || len(secret) > maxWebhookSecret {
		return invalid("secret", "%d bytes; from %d to %d", len(secret), minWebhookSecret, maxWebhookSecret)
	}
	for _, r := range secret {
		if r < 0x21 || r > 0x7e {
			return invalid("secret", "printable ASCII without spaces")
		}
	}
	return nil
}

// ParseWebhookBatchSize validates how many events one delivery may carry: 0 (unset) means
// one event a delivery.
func ParseWebhookBatchSize(n int32) (int, error) {
	switch {
	case n == 0:
		return 1, nil
	case n < 0 || n > MaxWebhookBatch:
		return 0, invalid("batchSize", "%d; from 1 to %d events a delivery", n, MaxWebhookBatch)
	}
	return int(n), nil
}

// ParseDescription validates a subscription's free-text description.
func ParseDescription(d string) error {
	if len(d) > maxDescription {
		return invalid("description", "%d bytes, at most %d", len(d), maxDescription)
	}
	return nil
}

// NetworkPolicy says where webhooks may be sent. By default only public addresses: never
// loopback, link-local (cloud metadata among them), private, shared (CGNAT), multicast or
// unspecified ranges; Allow lists the ranges let through anyway (a development receiver on
// loopback, a private network the operator trusts). AllowHTTP lets plain http through.
type NetworkPolicy struct {
	Allow     []netip.Prefix
	AllowHTTP bool
}

// forbiddenRanges are refused unless NetworkPolicy.Allow lets them through.
var forbiddenRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, 169.254.169.254 the metadata service of most clouds
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"), // unique local, fd00:ec2::254 AWS's metadata service
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64 (RFC 8215): a network's own translation
}

// CheckURL validates a webhook URL's form: https (http only when allowed), a host, no user
// information, no fragment. Where the host points is checked by CheckAddress, at
// subscription and again at each connection (a name may resolve elsewhere later).
func (p NetworkPolicy) CheckURL(raw string) (*url.URL, error) {
	if raw == "" || len(raw) > maxWebhookURLLength {
		return nil, invalid("url", "1 to %d characters", maxWebhookURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalid("url", "not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && p.AllowHTTP:
	default:
		return nil, fmt.Errorf("%w: url: scheme %q; webhooks are sent over https", ErrDestinationForbidden, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, invalid("url", "needs a host")
	}
	if u.User != nil {
		return nil, invalid("url", "must not carry user information (sign with the secret instead)")
	}
	if u.Fragment != "" {
		return nil, invalid("url", "must not carry a fragment")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, invalid("url", "port %q out of range", port)
		}
	}
	return u, nil
}

// CheckAddress refuses an address in a forbidden range the policy does not allow. The
// range is judged without the address's zone: a prefix contains no zoned address, yet
// "::1%lo" reaches loopback all the same.
func (p NetworkPolicy) CheckAddress(ip netip.Addr) error {
	ip = ip.WithZone("").Unmap()
	if embedded, ok := embeddedIPv4(ip); ok {
		// NAT64 and 6to4 reach the IPv4 address inside: judged as that address.
		if err := p.CheckAddress(embedded); err != nil {
			return fmt.Errorf("%w (reached through %s)", err, ip)
		}
	}
	for _, allowed := range p.Allow {
		if allowed.Contains(ip) {
			return nil
		}
	}
	for _, r := range forbiddenRanges {
		if r.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s (loopback, link-local, private and metadata ranges are refused: webhooks.allowNetworks lets one through)", ErrDestinationForbidden, ip, r)
		}
	}
	return nil
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the IPv4 address in the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // RFC 3056: the IPv4 address in bits 16 to 47
)

// embeddedIPv4 is the IPv4 address an IPv6 address of a translation range reaches.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, false
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixTo4.Contains(ip):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// CheckHostAddresses refuses a host any of whose addresses is forbidden.
func (p NetworkPolicy) CheckHostAddresses(host string, addrs []net.IP) error {
	if len(addrs) == 0 {
		return invalid("url", "host %q does not resolve", host)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a)
		if !ok {
			return invalid("url", "host %q resolves to a malformed address", host)
		}
		if err := p.CheckAddress(ip); err != nil {
			return fmt.Errorf("url: host %s: %w", host, err)
		}
	}
	return nil
}

// WebhookSignature is the value of a delivery's Txm-Signature header: the time it was signed
// and the HMAC-SHA256, keyed with the subscription's secret, of "<time>.<body>". A receiver
// recomputes it, compares in constant time, and refuses a time too far from its clock (a
// replayed delivery).
func WebhookSignature(secret []byte, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",v1=" + signHex(secret, ts, body)
}

func signHex(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// VerifyWebhookSignature checks a Txm-Signature header against body, refusing one signed
// further than tolerance from now: what a receiver does, and what the tests do.
func VerifyWebhookSignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return errors.New("malformed signature header")
	}
	if d := now.Sub(time.Unix(at, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signed %s from now, beyond the %s tolerance", d, tolerance)
	}
	want := signHex(secret, ts, body)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return errors.New("signature does not match")
	}
	return nil
}
