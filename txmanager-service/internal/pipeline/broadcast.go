package pipeline

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// BroadcastItem is one signed transaction to send: its bytes and every hash of ours the
// node might know for its nonce.
type BroadcastItem struct {
	TxID uuid.UUID
	Raw  []byte
	Ours []common.Hash
	// FirstSend: the row shows SIGNED with no error (the attempt was stored and never sent).
	FirstSend bool
}

// Broadcaster sends signed transactions and records what each answer means
// (services.OutcomeOf), fenced.
type Broadcaster struct {
	chain   services.TxSender
	store   AttemptStore
	leases  *services.LeaseManager
	metrics *telemetry.Metrics
	log     *log.Helper
	unknown wordingsSeen
}

// NewBroadcaster builds the broadcaster.
func NewBroadcaster(chain services.TxSender, store AttemptStore, leases *services.LeaseManager, metrics *telemetry.Metrics, logger log.Logger) *Broadcaster {
	return &Broadcaster{chain: chain, store: store, leases: leases, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node()))}
}

// Broadcast sends the items in one batched round trip (in order) and records each
// outcome. Answers whose meaning depends on whose transaction holds the nonce ("nonce too
// low" after a lost response) are settled by asking the node for our hashes, never guessed.
func (b *Broadcaster) Broadcast(ctx context.Context, lease domain.Lease, items []BroadcastItem) ([]BroadcastOutcome, error) {
	raws := make([][]byte, len(items))
	for i, it := range items {
		raws[i] = it.Raw
	}
	sendErrs, err := b.chain.SendRawTransactions(ctx, raws)
	if err != nil {
		sendErrs = make([]error, len(items))
		for i := range sendErrs {
			sendErrs[i] = err
		}
	}
	ownership := b.ownership(ctx, items, sendErrs)
	outcomes := make([]BroadcastOutcome, len(items))
	meanings := make([]services.ChainOutcome, len(items))
	for i, it := range items {
		meanings[i] = services.OutcomeOf(sendErrs[i], ownership[i])
		outcomes[i] = BroadcastOutcome{TxID: it.TxID, TxHash: crypto.Keccak256Hash(it.Raw), SubState: meanings[i].SubState, LastError: meanings[i].LastError,
			Result: meanings[i].Result}
		b.metrics.TxSubmit(ctx, outcomes[i].Result)
	}
	if toWrite := worthWriting(items, outcomes, lease.HeldAt(time.Now())); len(toWrite) > 0 {
		if err := b.store.RecordBroadcasts(ctx, lease, toWrite); err != nil {
			return outcomes, b.leases.Fence(ctx, lease, err)
		}
	}
	for i, o := range outcomes {
		if o.Result == services.UnknownAnswerResult && b.unknown.first(sendErrs[i].Error()) {
			b.log.WithContext(ctx).Warnw("msg", "a node answered in words no class knows; rebroadcasting as after a failed send until it is classified (docs/chains.md)",
				"signer", lease.Signer, "tx_id", o.TxID.String(), "phrase", sendErrs[i].Error())
		}
		if sendErrs[i] != nil {
			b.log.WithContext(ctx).Infow("msg", "broadcast outcome", "signer", lease.Signer, "tx_id", o.TxID.String(), "fencing_token", lease.Token,
				"result", o.Result, "sub_state", string(o.SubState), "next", string(meanings[i].Next), "last_error", o.LastError)
		}
	}
	return outcomes, nil
}

// worthWriting is the outcomes that change what the row says. A first send the node
// accepted is not written: the row already shows SIGNED (stored, on its way to the node),
// and its next write (the receipt, or its final state) follows within blocks; a row version
// for SUBMITTED in between cost every transfer a write. Nothing depends on it: a response
// lost with a crash is found again from the chain, and every later resubmission writes its
// outcome when it differs. Errors are always written, so a refusal shows at once. When the
// lease can no longer be trusted by the time the node answered (leaseHeld false: the node
// was paused or the send outlived the lease), the outcome is written anyway: the fenced
// write is how this node learns at once that the signer is no longer its own.
func worthWriting(items []BroadcastItem, outcomes []BroadcastOutcome, leaseHeld bool) []BroadcastOutcome {
	if !leaseHeld {
		return outcomes
	}
	toWrite := outcomes[:0:0]
	for i, o := range outcomes {
		if items[i].FirstSend && o.SubState == domain.SubStateSubmitted && o.LastError == "" {
			continue
		}
		toWrite = append(toWrite, o)
	}
	return toWrite
}

// ownership asks the node, in one batch, whether it has any of our hashes for the items
// whose answer needs it; an item it could not check is OwnershipUnchecked.
func (b *Broadcaster) ownership(ctx context.Context, items []BroadcastItem, sendErrs []error) []services.Ownership {
	out := make([]services.Ownership, len(items))
	var hashes []common.Hash
	var owners []int
	for i, it := range items {
		if services.NeedsOwnership(sendErrs[i]) {
			out[i] = services.OwnershipUnchecked
			for _, h := range it.Ours {
				hashes = append(hashes, h)
				owners = append(owners, i)
			}
		}
	}
	if len(hashes) == 0 {
		return out
	}
	known, err := b.chain.TransactionsKnown(ctx, hashes)
	if err != nil {
		b.log.Warnw("msg", "checking our hashes after nonce too low failed", "error", err.Error())
		return out
	}
	for _, i := range owners {
		out[i] = services.OwnershipForeign
	}
	for j, k := range known {
		if k {
			out[owners[j]] = services.OwnershipOurs
		}
	}
	return out
}

// Span starts a span for one piece of a stage's work on a signer.
func Span(ctx context.Context, metrics *telemetry.Metrics, name string, lease domain.Lease) (context.Context, trace.Span) {
	return metrics.Tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String("signer", lease.Signer), attribute.Int64("fencing_token", int64(lease.Token))))
}

// wordingsSeen remembers the wordings of unknown answers already logged, so each is logged
// once per process however many transactions meet it. Numbers and hex are ignored (the
// same refusal names other nonces and balances); past maxWordings every one is logged.
type wordingsSeen struct {
	mu   sync.Mutex
	seen map[string]bool
}

const maxWordings = 1024

// first reports whether message's wording is new, and remembers it.
func (w *wordingsSeen) first(message string) bool {
	key := wordingOf(message)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen[key] {
		return false
	}
	if w.seen == nil {
		w.seen = map[string]bool{}
	}
	if len(w.seen) < maxWordings {
		w.seen[key] = true
	}
	return true
}

// numbers are what differs between two answers of the same wording.
var numbers = regexp.MustCompile(`0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|[0-9]+`)

func wordingOf(message string) string {
	return numbers.ReplaceAllString(strings.ToLower(message), "#")
}
