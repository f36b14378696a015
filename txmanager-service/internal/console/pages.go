package console

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"strconv"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// pageRows bounds every list a page shows.
const pageRows = 50

// signerView is one signer's row on the overview and the head of its own page.
type signerView struct {
	ChainID uint64
	services.SignerStatus
	// Balance is the funds check's last reading (nil: none yet), taken at BalanceAt; a page
	// never asks the chain itself, so it answers at once while a node fails.
	Balance    *big.Int
	BalanceAt  time.Time
	Paused     bool
	Roster     string // active, retiring, retired; "" when configured, not in the roster
	Badges     []badge
	Recovering bool
}

type badge struct{ Text, Class string }

func (c *Console) signerView(chain *services.ChainServices, status services.SignerStatus, roster map[string]services.RosterEntry) signerView {
	s := signerView{ChainID: chain.ID, SignerStatus: status, Recovering: status.Condition.Recovering(chain.Admin.RecoverByIntent())}
	if e, ok := roster[status.Signer]; ok {
		s.Paused, s.Roster = e.PausedAt != nil, string(e.State)
	}
	if chain.Funds != nil {
		s.Balance, s.BalanceAt, _ = chain.Funds.LastBalance(common.HexToAddress(status.Signer))
	}
	s.Badges = badgesOf(s)
	return s
}

// badgesOf names a signer's condition the way an operator reads it, worst first.
func badgesOf(s signerView) []badge {
	var out []badge
	c := s.Condition
	switch {
	case s.Quarantined && s.Recovering:
		out = append(out, badge{"recovering", "warn"})
	case s.Quarantined:
		out = append(out, badge{"quarantined", "bad"})
	}
	if c.SigningFailingSince != nil {
		out = append(out, badge{"cannot sign", "bad"})
	}
	if s.StuckCount > 0 {
		out = append(out, badge{strconv.Itoa(s.StuckCount) + " stuck", "bad"})
	}
	if s.Paused {
		out = append(out, badge{"paused", "warn"})
	}
	if s.Roster == "retiring" || s.Roster == "retired" {
		out = append(out, badge{s.Roster, "warn"})
	}
	if !s.LeaseLive {
		out = append(out, badge{"no live lease", "warn"})
	}
	if len(out) == 0 {
		out = append(out, badge{"serving", "ok"})
	}
	return out
}

func (c *Console) rosterByAddress(ctx context.Context) map[string]services.RosterEntry {
	out := map[string]services.RosterEntry{}
	entries, err := c.roster.List(ctx)
	if err != nil {
		return out // the roster's states are extra; the page goes on without them
	}
	for _, e := range entries {
		out[e.Signer.Hex()] = e
	}
	return out
}

// overview lists every signer the viewer may see, per chain, and the latest completions.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, v viewer) {
	ctx, cancel := requestContext(r, v)
	defer cancel()
	roster := c.rosterByAddress(ctx)
	type chainView struct {
		ID      uint64
		Signers []signerView
	}
	var chains []chainView
	for _, id := range c.chains.IDs() {
		chain, err := c.chains.Lookup(id)
		if err != nil {
			c.failed(w, r, v, err)
			return
		}
		statuses, err := chain.Admin.Signers(ctx)
		if err != nil {
			c.failed(w, r, v, err)
			return
		}
		cv := chainView{ID: id}
		for _, st := range statuses {
			if v.CanUse(common.HexToAddress(st.Signer)) {
				cv.Signers = append(cv.Signers, c.signerView(chain, st, roster))
			}
		}
		chains = append(chains, cv)
	}
	recent, err := c.completions.Recent(ctx, 20, v.SignerFilter())
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	c.render(w, r, v, http.StatusOK, "overview", map[string]any{"Chains": chains, "Recent": reversed(recent.Completions), "After": recent.Next})
}

func reversed[T any](in []T) []T {
	out := make([]T, len(in))
	for i, x := range in {
		out[len(in)-1-i] = x
	}
	return out
}

// signerPage shows one signer: its condition, queue, recent transactions and quarantine.
func (c *Console) signerPage(w http.ResponseWriter, r *http.Request, v viewer) {
	chainID, err := strconv.ParseUint(r.PathValue("chain"), 10, 64)
	if err != nil || chainID == 0 {
		c.problem(w, r, v, http.StatusBadRequest, "The chain id must be a positive number.")
		return
	}
	if !common.IsHexAddress(r.PathValue("signer")) {
		c.problem(w, r, v, http.StatusBadRequest, "The signer must be a 0x-prefixed address of 40 hex digits.")
		return
	}
	addr := common.HexToAddress(r.PathValue("signer"))
	if !v.CanUse(addr) {
		c.problem(w, r, v, http.StatusForbidden, "This credential is not granted signer "+addr.Hex()+".")
		return
	}
	before := uint64(1) << 62
	if b := r.URL.Query().Get("before"); b != "" {
		if before, err = strconv.ParseUint(b, 10, 64); err != nil {
			c.problem(w, r, v, http.StatusBadRequest, "before must be a nonce.")
			return
		}
	}
	ctx, cancel := requestContext(r, v)
	defer cancel()
	chain, err := c.chains.Lookup(chainID)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	status, err := chain.Admin.SignerStatus(ctx, addr.Hex())
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	head := c.signerView(chain, status, c.rosterByAddress(ctx))
	var quarantine *services.Quarantine
	if status.Quarantined {
		q, err := chain.Admin.GetQuarantine(ctx, addr.Hex(), 0, 0, false)
		if err != nil {
			c.failed(w, r, v, err)
			return
		}
		quarantine = &q
	}
	queue, err := c.store.OpenTxs(ctx, chainID, addr.Hex(), pageRows)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	recent, err := c.store.SignerTxs(ctx, chainID, addr.Hex(), before, pageRows)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	var older uint64
	if len(recent) == pageRows {
		older = recent[len(recent)-1].Nonce
	}
	c.render(w, r, v, http.StatusOK, "signer", map[string]any{"Signer": head, "Quarantine": quarantine, "Queue": queue, "Recent": recent, "Older": older})
}

// timelineEntry is one step of a transaction's life.
type timelineEntry struct {
	At     *time.Time
	Title  string
	Detail string
	Hash   string
	Class  string
}

// txPage shows one transaction's life: its timeline, attempts and their fees.
func (c *Console) txPage(w http.ResponseWriter, r *http.Request, v viewer) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.problem(w, r, v, http.StatusBadRequest, "A transaction id is a UUID.")
		return
	}
	ctx, cancel := requestContext(r, v)
	defer cancel()
	tx, err := c.chains.Any().Get.ByID(ctx, id.String())
	if errors.Is(err, domain.ErrNotFound) {
		// An intent waiting for approval has no transaction row yet.
		if a, aerr := c.approvals.Get(ctx, id.String()); aerr == nil && v.CanUse(a.Signer) {
			http.Redirect(w, r, "/console/approvals#a-"+a.ID.String(), http.StatusSeeOther)
			return
		}
	}
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	if !v.CanUse(tx.Signer) {
		c.problem(w, r, v, http.StatusNotFound, "Not found.") // not granted: as if it did not exist
		return
	}
	attempts, err := c.store.Attempts(ctx, id)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	completed, err := c.store.CompletedAt(ctx, id)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	var after string
	if completed == nil {
		// The page's script follows the feed from here to reload when this one is final.
		tail, err := c.completions.Recent(ctx, 1, v.SignerFilter())
		if err != nil {
			c.failed(w, r, v, err)
			return
		}
		after = tail.Next
	}
	var price *big.Int
	if tx.Receipt != nil {
		price = tx.Receipt.EffectiveGasPrice
	}
	c.render(w, r, v, http.StatusOK, "tx", map[string]any{
		"Tx": tx, "Attempts": attempts, "Timeline": timeline(tx, attempts, completed), "Chart": feeChart(attempts, price),
		"After": after, "Open": (tx.State == domain.StateTracking || tx.State == domain.StateStuck) && tx.Receipt == nil, "Completed": completed != nil,
	})
}

// timeline orders what is known of a transaction's life.
func timeline(tx domain.ManagedTx, attempts []services.Attempt, completed *time.Time) []timelineEntry {
	created := tx.CreatedAt
	out := []timelineEntry{{At: &created, Title: "Created", Detail: "nonce " + strconv.FormatUint(tx.Nonce, 10) + " allocated in the same transaction", Class: "ok"}}
	for i, a := range attempts {
		at := a.At
		title := "Attempt " + strconv.Itoa(i+1) + " signed (" + a.Kind + ")"
		if a.Kind == "REPLACE" {
			title = "Attempt " + strconv.Itoa(i+1) + ": replacement with a higher fee"
		}
		detail := "max fee " + gwei(a.MaxFee) + ", tip " + gwei(a.MaxTip)
		if a.BaseFee != nil {
			detail += ", base fee then " + gwei(a.BaseFee)
		}
		out = append(out, timelineEntry{At: &at, Title: title, Detail: detail, Hash: a.Hash.Hex()})
	}
	if tx.Receipt != nil {
		status, class := "succeeded", "ok"
		if tx.Receipt.Status == 0 {
			status, class = "reverted", "bad"
		}
		detail := "block " + strconv.FormatUint(tx.Receipt.BlockNumber, 10) + ", gas used " + strconv.FormatUint(tx.Receipt.GasUsed, 10)
		if fee := tx.Receipt.Fee(); fee != nil {
			detail += ", fee " + ether(fee)
		}
		out = append(out, timelineEntry{Title: "Mined: " + status, Detail: detail, Hash: tx.Receipt.TxHash.Hex(), Class: class})
		if tx.ConfirmedAt == nil {
			out = append(out, timelineEntry{Title: "Waiting for confirmations", Detail: "final once enough blocks are built on block " + strconv.FormatUint(tx.Receipt.BlockNumber, 10)})
		}
	}
	if tx.ConfirmedAt != nil {
		class := "ok"
		if tx.State == domain.StateFailedFinal {
			class = "bad"
		}
		out = append(out, timelineEntry{At: tx.ConfirmedAt, Title: "Final: " + string(tx.State), Detail: "confirmed deep enough not to be reorganised away", Class: class})
	}
	if completed != nil {
		out = append(out, timelineEntry{At: completed, Title: "In the completions feed", Detail: "readers and webhooks learn the final state from here"})
	}
	return out
}
