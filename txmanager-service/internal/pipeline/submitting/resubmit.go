package submitting

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ResubmitDue rebroadcasts the signer's transactions whose resubmission is due (not mined
// within the resubmit interval), STUCK ones included. They are claimed first, in one
// fenced statement (advance next_resubmit_at, count the attempt), and only the claimed ones
// are sent, lowest nonce first. What each does with its fees is the reaction to the step its
// last answer put it on (resubmitReactions): re-priced to the market, outbid, or kept. A
// replacement is signed and stored fenced before it is sent; otherwise the same signed
// bytes go out again.
//
// A signer none of whose transactions can be due yet is skipped without a read
// (resubmitQuiet): after a pass that left nothing due, it reads when the first of them is.
func (s *Submitter) ResubmitDue(ctx context.Context, lease domain.Lease, limit int) (int, error) {
	at := frontierEpoch{signer: lease.Signer, token: lease.Token, server: s.server.ServerEpoch()}
	start := s.now()
	if s.resubmits.quiet(at, start) {
		return 0, nil
	}
	gen := s.resubmits.generation()
	ctx, span := pipeline.Span(ctx, s.metrics, "pipeline.resubmit", lease)
	defer span.End()
	due, err := s.store.ListResubmitDue(ctx, lease.Signer, limit)
	if err != nil {
		return 0, err
	}
	if len(due) < limit {
		// Whatever this pass sends is claimed (due again one interval on) before the
		// read below, so it finds the first row due after this pass.
		defer s.learnNextDue(ctx, at, gen, start)
	}
	if len(due) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(due))
	for i, d := range due {
		ids[i] = d.TxID
	}
	claimed, err := s.store.ClaimResubmits(ctx, lease, ids, s.cfg.ResubmitInterval)
	if err != nil {
		return 0, s.leases.Fence(ctx, lease, err)
	}
	items := claimedItems(due, claimed)
	if len(items) == 0 {
		return 0, nil
	}
	if items, err = s.reprice(ctx, lease, due, items); err != nil {
		return 0, err
	}
	outcomes, err := s.broadcaster.Broadcast(ctx, lease, items)
	for _, o := range outcomes {
		s.metrics.Resubmit(ctx, o.Result)
	}
	s.outbidAtOnce(outcomes)
	return len(items), err
}

// outbidAtOnce has the next resubmit pass read the signer's due transactions when a node
// refused one's price: its row is due at once (RecordBroadcasts), the replacement need not
// wait for the resubmit interval.
func (s *Submitter) outbidAtOnce(outcomes []pipeline.BroadcastOutcome) {
	for _, o := range outcomes {
		if services.StepAfter(o.SubState) == services.StepReprice {
			s.resubmits.wake()
			return
		}
	}
}

// learnNextDue reads when the signer's first transaction is due again and skips the
// signer's passes until then, one resubmit interval at most. A failed read skips nothing.
func (s *Submitter) learnNextDue(ctx context.Context, at frontierEpoch, gen uint64, start time.Time) {
	in, pending, err := s.store.NextResubmitIn(ctx, at.signer)
	if err != nil || (pending && in <= 0) {
		return
	}
	if !pending || in > s.cfg.ResubmitInterval {
		in = s.cfg.ResubmitInterval
	}
	s.resubmits.until(at, gen, start.Add(in))
}

// ResubmitSoon has every signer's next resubmit pass read its due transactions: a reorg
// made some due at once.
func (s *Submitter) ResubmitSoon() { s.resubmits.wake() }

// claimedItems is what goes out again: the due transactions the claim kept, in the order
// they were listed (lowest nonce first), each with every hash of ours the node may know.
func claimedItems(due []DueResubmit, claimedIDs []uuid.UUID) []pipeline.BroadcastItem {
	var items []pipeline.BroadcastItem
	for _, d := range due {
		if slices.Contains(claimedIDs, d.TxID) {
			items = append(items, pipeline.BroadcastItem{TxID: d.TxID, Raw: d.Raw, Ours: d.AllHashes})
		}
	}
	return items
}

// feeReaction is what a resubmission does with a transaction's fees on one step of the
// outcome table: the fees of a replacement and RaiseFees, or KeepFees / AtFeeCap to send
// the same bytes.
type feeReaction func(policy services.FeePolicy, prevFee, prevTip *big.Int, s services.FeeSuggestion) (maxFee, maxTip *big.Int, action services.RepriceAction)

// keepFees sends the same bytes whatever the market says.
func keepFees(_ services.FeePolicy, prevFee, prevTip *big.Int, _ services.FeeSuggestion) (*big.Int, *big.Int, services.RepriceAction) {
	return prevFee, prevTip, services.KeepFees
}

// resubmitReactions carries out each step of the outcome table (services.StepAfter of the
// sub-state the last answer recorded) at resubmission; the step's comment says why.
var resubmitReactions = map[services.NextStep]feeReaction{
	services.StepAwaitReceipt: services.FeePolicy.Reprice,
	services.StepRebroadcast:  services.FeePolicy.Reprice,
	services.StepReprice:      services.FeePolicy.Outbid,
	services.StepWaitForFunds: keepFees,
	services.StepSettleNonce:  keepFees,
	services.StepHoldFees:     keepFees,
	services.StepCancel:       keepFees,
}

// reactionTo is the reaction to sub's step; a step without one (a table row added without
// its reaction, which a test catches) re-prices to the market, what every step did before
// steps had reactions.
func reactionTo(sub domain.SubState) feeReaction {
	if react, ok := resubmitReactions[services.StepAfter(sub)]; ok {
		return react
	}
	return services.FeePolicy.Reprice
}

// maxSigningFailuresInARow: after this many re-signatures in a row failed, a resubmission
// pass re-prices nothing more. One failure (a throttled call) does not stop the others.
const maxSigningFailuresInARow = 2

// reprice replaces the bytes of every item its step's reaction raises with a re-priced
// attempt, stored (fenced) as the transaction's current one before anything is sent. Without a fee suggestion the items go out as they are: a rebroadcast must not
// wait for the fee oracle.
func (s *Submitter) reprice(ctx context.Context, lease domain.Lease, due []DueResubmit, items []pipeline.BroadcastItem) ([]pipeline.BroadcastItem, error) {
	suggestion, err := s.chain.SuggestFees(ctx)
	if err != nil {
		s.log.WithContext(ctx).Warnw("msg", "no fee suggestion; rebroadcasting at the current fees", "signer", lease.Signer, "error", err.Error())
		return items, nil
	}
	current := make(map[uuid.UUID]DueResubmit, len(due))
	for _, d := range due {
		current[d.TxID] = d
	}
	var replacements []Replacement
	failedInARow := 0
	for _, it := range items {
		if failedInARow >= maxSigningFailuresInARow {
			// The key source is failing (down, or hanging to its deadline on every call):
			// the rest go out at their current fees now rather than each waiting out a
			// failed signature first, which held a whole batch's rebroadcast for minutes.
			s.metrics.Reprice(ctx, "skipped")
			continue
		}
		d := current[it.TxID]
		gas := attemptGas(d.Raw)
		raisedGas, regas := s.raisedGasLimit(ctx, lease, d, gas)
		if regas {
			gas = raisedGas
		}
		fees := s.cfg.Fees
		if boundByAdmission(d.Kind) {
			// The intent's attempts keep its own fee caps. A cancellation or a placeholder is
			// priced on its own, as the stuck stage priced it: held to the intent's caps, one
			// whose intent was stuck below the market could never be re-priced.
			fees = fees.CappedBy(d.IntentMaxFee, d.IntentMaxTip)
		}
		policy := fees.ForGasLimit(gas)
		if boundByAdmission(d.Kind) {
			policy = policy.ForAdmittedGas(d.AdmittedGasLimit, gas)
		}
		maxFee, maxTip, action := reactionTo(d.SubState)(policy, d.MaxFee, d.MaxTip, suggestion)
		if regas {
			// The node that answered refused the attempt, but another may hold it: the new
			// limit outbids it where the caps for that limit leave room, and otherwise goes out
			// at what a first attempt would pay now.
			var outbid services.RepriceAction
			if maxFee, maxTip, outbid = policy.Outbid(d.MaxFee, d.MaxTip, suggestion); outbid != services.RaiseFees {
				maxFee, maxTip, _ = policy.Initial(domain.Intent{}, suggestion)
			}
			if floor := marketFloor(suggestion); maxFee.Cmp(floor) < 0 {
				s.warnOnce(ctx, it.TxID, "short of the L1 part, but the fee cap left for a larger gas limit is below the market's; broadcasting it as it is",
					"signer", lease.Signer, "tx_id", it.TxID.String(), "gas_limit", attemptGas(d.Raw), "needs", gas, "max_fee", maxFee.String(), "market", floor.String())
				continue
			}
			action = services.RaiseFees
			s.log.WithContext(ctx).Infow("msg", "short of the L1 part: signing it again with the node's estimate now", "signer", lease.Signer,
				"tx_id", it.TxID.String(), "gas_limit", attemptGas(d.Raw), "new_gas_limit", gas, "max_fee", maxFee.String())
		} else {
			gas = 0 // the same limit
		}
		switch action {
		case services.AtFeeCap:
			s.metrics.Reprice(ctx, "at_cap")
			s.log.WithContext(ctx).Warnw("msg", "underpriced, and the fee caps leave no room for a replacement; waiting at the current fees",
				"signer", lease.Signer, "tx_id", it.TxID.String(), "max_fee", d.MaxFee.String(), "base_fee", pipeline.OrZero(suggestion.BaseFee).String())
			continue
		case services.KeepFees:
			continue
		}
		attempt, err := s.resign(ctx, d, maxFee, maxTip, suggestion.BaseFee, gas)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("re-price %s: %w", it.TxID, err)
			}
			// One that cannot be re-signed now (its key source failed) goes out as it is, and
			// the batch's others are re-priced and sent: the claim already moved every row's
			// next resubmission, so dropping the batch would hold them all for an interval.
			s.metrics.Reprice(ctx, "failed")
			s.log.WithContext(ctx).Warnw("msg", "re-pricing failed; rebroadcasting at the current fees", "signer", lease.Signer, "tx_id", it.TxID.String(),
				"error", err.Error())
			failedInARow++
			continue
		}
		failedInARow = 0
		replacements = append(replacements, Replacement{Replaced: d.Current, Attempt: attempt})
	}
	if len(replacements) == 0 {
		return items, nil
	}
	stored, err := s.store.RecordReplacements(ctx, lease, replacements)
	if err != nil {
		return nil, s.leases.Fence(ctx, lease, err)
	}
	if len(stored) > 0 && s.replaced != nil {
		s.replaced()
	}
	items, raised := withReplacements(items, replacements, stored)
	for _, a := range raised {
		s.metrics.Reprice(ctx, "raised")
		s.log.WithContext(ctx).Infow("msg", "transaction re-priced", "signer", lease.Signer, "tx_id", a.TxID.String(), "fencing_token", lease.Token,
			"tx_hash", a.Hash.Hex(), "max_fee", a.MaxFee.String(), "max_tip", a.MaxTip.String())
	}
	return items, nil
}

// marketFloor is the least a transaction must offer per gas to be mined now: the base fee,
// or on a chain without one the suggested gas price.
func marketFloor(s services.FeeSuggestion) *big.Int {
	if s.Legacy {
		return pipeline.OrZero(s.GasPrice)
	}
	return pipeline.OrZero(s.BaseFee)
}

// attemptGas is the gas limit a signed attempt carries (0 when its bytes do not decode).
func attemptGas(raw []byte) uint64 {
	var tx types.Transaction
	if err := tx.UnmarshalBinary(raw); err != nil {
		return 0
	}
	return tx.Gas()
}

// withReplacements sends, for each item whose replacement was stored as its current
// attempt, the replacement's bytes, and adds its hash to ours; a replacement the store did
// not take (the transaction was mined or moved on meanwhile) is dropped. It returns the
// items and the replacements that took.
func withReplacements(items []pipeline.BroadcastItem, replacements []Replacement, stored []uuid.UUID) ([]pipeline.BroadcastItem, []pipeline.SignedAttempt) {
	became := make(map[uuid.UUID]pipeline.SignedAttempt, len(stored))
	for _, r := range replacements {
		if slices.Contains(stored, r.Attempt.TxID) {
			became[r.Attempt.TxID] = r.Attempt
		}
	}
	out := slices.Clone(items)
	var raised []pipeline.SignedAttempt
	for i, it := range out {
		if a, ok := became[it.TxID]; ok {
			out[i].Raw, out[i].Ours = a.Raw, append(slices.Clone(it.Ours), a.Hash)
			raised = append(raised, a)
		}
	}
	return out, raised
}

// resign signs the current attempt's transaction again with new fees, and with gas as its
// limit unless that is 0: same nonce, recipient, value and data, same type (legacy or
// EIP-1559); an original becomes a replacement, any other kind stays what it is.
func (s *Submitter) resign(ctx context.Context, d DueResubmit, maxFee, maxTip, baseFee *big.Int, gas uint64) (pipeline.SignedAttempt, error) {
	u, err := s.signer.Decode(d.Raw)
	if err != nil {
		return pipeline.SignedAttempt{}, err
	}
	u.MaxFee, u.MaxTip, u.BaseFee = maxFee, maxTip, baseFee
	if gas != 0 {
		u.Gas = gas
	}
	kind := d.Kind
	if kind == pipeline.AttemptOriginal {
		kind = pipeline.AttemptReplace
	}
	return s.signer.Sign(ctx, d.TxID, kind, u)
}
