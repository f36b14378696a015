package writer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// quarantined fails the signer's ops when it is quarantined, or quarantines it now when the
// chain's nonce is above the cursor: the chain then holds transactions at nonces the
// database does not know, which after a failover to a standby that missed commits are
// likely this service's own. Allocating above them would hide that; only an operator who
// looked (admin API) releases the signer. A signer the database knows nothing of yet (no
// cursor) is a first use, not a loss, and is adopted.
func (a *Allocator) quarantined(ctx context.Context, sess txmanager.Session, b *signerBatch, state services.CursorState) (bool, error) {
	refuse := func(detail string) {
		err := fmt.Errorf("%w: %s; an operator lists the unknown nonces and releases it through the admin API", domain.ErrSignerQuarantined, detail)
		for i := range b.ops {
			b.outcome[i].err = err
		}
		a.cache.Evict(b.key)
	}
	if state.Quarantined && (a.nonce.RecoverByIntent || state.Releasing) {
		// The pipeline records the chain's unknown transactions and releases the signer
		// (by itself in recovery.mode adopt-by-intent, or because an operator asked): a
		// retry in a moment is served, and a lost request's retry is answered with its
		// transaction on chain.
		for i := range b.ops {
			b.outcome[i].err = &domain.UnavailableError{Reason: "signer recovering transactions the database lost from the chain", RetryAfter: time.Second,
				Err: errors.New("the chain holds nonces of this signer that the database does not know; they are being recorded")}
		}
		a.cache.Evict(b.key)
		if a.notify != nil {
			a.notify.NotifyQuarantined(b.key)
		}
		return true, nil
	}
	if state.Quarantined {
		refuse("the chain holds nonces of this signer that the database does not know")
		return true, nil
	}
	if a.nonce.AdoptUnknownChainNonces || state.Next == nil || b.chainNext == nil || *b.chainNext <= *state.Next {
		return false, nil
	}
	recorded, err := a.store.Quarantine(ctx, sess, b.lease, *state.Next, *b.chainNext)
	if err != nil || !recorded {
		// Not recorded: an operator released these nonces; allocate above them.
		return false, err
	}
	a.metrics.Quarantined(ctx)
	a.log.WithContext(ctx).Errorw("msg", "signer quarantined: the chain holds nonces the database does not know", "signer", b.key,
		"fencing_token", b.lease.Token, "db_next_nonce", *state.Next, "chain_nonce", *b.chainNext)
	// In the batch's transaction: subscribers hear of the quarantine exactly when it is recorded.
	if err := a.store.AppendEvent(ctx, sess, services.SignerEvent(domain.EventQuarantined, a.chainID, b.signer,
		map[string]any{"signer": b.key, "dbNextNonce": *state.Next, "chainNonce": *b.chainNext})); err != nil {
		return false, err
	}
	if a.nonce.RecoverByIntent {
		state.Quarantined = true
		return a.quarantined(ctx, sess, b, state)
	}
	refuse(fmt.Sprintf("the chain's nonce is %d, the database knows nonces below %d only", *b.chainNext, *state.Next))
	return true, nil
}

// lostCursor is state with a cursor row the database lost read as 0. The row is gone while
// this node holds nonces it allocated below its cache: the database lost those commits,
// cursor and all. Read as a first use, the retry after the cache is dropped would allocate
// above the chain's nonce with nothing left to show the loss (a lost request's retry
// executed twice). Read as 0, the batch is refused for a retry (lostAllocations), and the
// retry, having read the chain, quarantines what the chain holds above it (quarantined). It
// is remembered for the lease's epoch, not kept on the batch: the batch's transaction may
// run again, and the retry's batch has no cache left to tell. A new owner, or this node
// after its lease lapsed, has no such memory: a cursor lost then reads as a first use, and
// the chain's nonce is allocated above as for any signer new to the database. Without the
// chain term (nonce.chainQuery off) the cache is the only record of the lost nonces and is
// kept: the next nonce is the cache's (never backwards, decision 0008).
func (a *Allocator) lostCursor(b *signerBatch, state services.CursorState) services.CursorState {
	if state.Next != nil || !a.nonce.ChainQuery {
		return state
	}
	lost := false
	if token, ok := a.lostCursors.Load(b.key); ok && token.(uint64) == b.lease.Token {
		lost = true
	} else if b.cachedNext != nil && *b.cachedNext > 0 {
		a.lostCursors.Store(b.key, b.lease.Token)
		a.log.Warnw("msg", "the database lost the signer's nonce cursor while this node held nonces it allocated: reading the chain before allocating again",
			"signer", b.key, "fencing_token", b.lease.Token, "cached_next_nonce", *b.cachedNext)
		lost = true
	}
	if lost {
		zero := uint64(0)
		state.Next = &zero
	}
	return state
}

// lostAllocations refuses the signer's part of the batch, for a retry, when the database's
// cursor is below the nonce this node's cache holds without having asked the chain: the
// cache only ever holds what this node committed, so the database lost those commits (a
// failover to a standby that missed them, unseen by the server watch when a pooler keeps
// the connection). Allocating from the cache would leave the lost nonces unrecorded and a
// lost request's retry executed twice; with the cache dropped, the retry reads the chain,
// and a chain ahead of the cursor quarantines the signer (quarantined).
func (a *Allocator) lostAllocations(b *signerBatch, state services.CursorState) error {
	// Without the chain term the cache is kept: dropped, it would give the lost nonces to
	// new creates (the next nonce is the larger of the cursor and the cache).
	if !a.nonce.ChainQuery || b.chainNext != nil || b.cachedNext == nil || state.Next == nil || *state.Next >= *b.cachedNext {
		return nil
	}
	a.cache.Evict(b.key)
	a.log.Warnw("msg", "the database's nonce cursor is below the nonces this node allocated: it lost commits; reading the chain before allocating again",
		"signer", b.key, "fencing_token", b.lease.Token, "db_next_nonce", *state.Next, "cached_next_nonce", *b.cachedNext)
	return &domain.UnavailableError{Reason: "the database lost this signer's last allocations; its nonces are read from the chain again", RetryAfter: 100 * time.Millisecond}
}
