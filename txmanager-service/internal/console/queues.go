package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// stuckPage lists the stuck transactions of every chain, with the resolution actions.
func (c *Console) stuckPage(w http.ResponseWriter, r *http.Request, v viewer) {
	ctx, cancel := requestContext(r, v)
	defer cancel()
	var stuck []domain.ManagedTx
	for _, id := range c.chains.IDs() {
		chain, err := c.chains.Lookup(id)
		if err != nil {
			c.failed(w, r, v, err)
			return
		}
		// A credential granted some signers reads theirs: the oldest page across every
		// signer could be all others', and the page would say nothing is stuck.
		scopes := []string{""}
		if !v.AllSigners {
			scopes = v.SignerFilter()
		}
		for _, signer := range scopes {
			txs, err := chain.Admin.ListStuck(ctx, signer, pageRows)
			if err != nil {
				c.failed(w, r, v, err)
				return
			}
			for _, tx := range txs {
				if v.CanUse(tx.Signer) {
					stuck = append(stuck, tx)
				}
			}
		}
	}
	slices.SortFunc(stuck, func(a, b domain.ManagedTx) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if len(stuck) > pageRows {
		stuck = stuck[:pageRows]
	}
	c.render(w, r, v, http.StatusOK, "stuck", map[string]any{"Stuck": stuck, "Actions": resolutionActions})
}

// resolutionActions are what an operator may put at a stuck nonce.
var resolutionActions = []domain.ResolutionAction{domain.ActionReplace, domain.ActionCancel, domain.ActionPlaceholder, domain.ActionNoop}

// quarantinesPage lists every quarantined signer with its unknown nonces as ranges.
func (c *Console) quarantinesPage(w http.ResponseWriter, r *http.Request, v viewer) {
	ctx, cancel := requestContext(r, v)
	defer cancel()
	type quarantineView struct {
		ChainID uint64
		services.Quarantine
	}
	var out []quarantineView
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
		for _, st := range statuses {
			if !st.Quarantined || !v.CanUse(common.HexToAddress(st.Signer)) {
				continue
			}
			q, err := chain.Admin.GetQuarantine(ctx, st.Signer, 0, 0, false)
			if err != nil {
				c.failed(w, r, v, err)
				return
			}
			out = append(out, quarantineView{ChainID: id, Quarantine: q})
		}
	}
	c.render(w, r, v, http.StatusOK, "quarantines", map[string]any{"Quarantines": out})
}

// approvalView is an approval with whether this viewer may vote on it.
type approvalView struct {
	domain.Approval
	CanVote bool
}

// approvalsPage lists intents waiting for approval, then the latest decided ones.
func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request, v viewer) {
	ctx, cancel := requestContext(r, v)
	defer cancel()
	waiting, err := c.approvals.List(ctx, string(domain.ApprovalAwaiting), "", v.SignerFilter(), pageRows)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	latest, err := c.approvals.List(ctx, "", "", v.SignerFilter(), pageRows)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	views := func(in []domain.Approval, open bool) []approvalView {
		out := make([]approvalView, len(in))
		for i, a := range in {
			out[i] = approvalView{Approval: a, CanVote: open && a.State == domain.ApprovalAwaiting && v.Roles[a.Role] && a.Requester != v.ID && !votedBy(a, v.ID)}
		}
		return out
	}
	var decided []domain.Approval
	for _, a := range latest {
		if a.State != domain.ApprovalAwaiting {
			decided = append(decided, a)
		}
	}
	c.render(w, r, v, http.StatusOK, "approvals", map[string]any{"Waiting": views(waiting, true), "Decided": views(decided, false)})
}

func votedBy(a domain.Approval, id string) bool {
	for _, vote := range a.Votes {
		if vote.Approver == id {
			return true
		}
	}
	return false
}

// auditPage shows the newest audit records to an admin.
func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, v viewer) {
	if !v.Admin {
		c.problem(w, r, v, http.StatusForbidden, "The audit trail is for credentials with the admin grant.")
		return
	}
	ctx, cancel := requestContext(r, v)
	defer cancel()
	records, err := c.store.RecentAudit(ctx, 100)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	c.render(w, r, v, http.StatusOK, "audit", map[string]any{"Records": records})
}

// search finds a transaction by its id, any attempt's hash, or its request id.
func (c *Console) search(w http.ResponseWriter, r *http.Request, v viewer) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	ctx, cancel := requestContext(r, v)
	defer cancel()
	if q == "" {
		c.render(w, r, v, http.StatusOK, "search", map[string]any{"Query": q})
		return
	}
	if len(q) > 256 {
		c.problem(w, r, v, http.StatusBadRequest, "A search is a transaction id, a transaction hash or a request id (at most 256 characters).")
		return
	}
	if id, err := uuid.Parse(q); err == nil {
		http.Redirect(w, r, "/console/tx/"+id.String(), http.StatusSeeOther)
		return
	}
	if len(q) == 66 && strings.HasPrefix(q, "0x") {
		if hash := common.HexToHash(q); hash.Hex() == strings.ToLower(q) {
			id, err := c.store.TxIDByHash(ctx, hash)
			var tx domain.ManagedTx
			if err == nil {
				tx, err = c.chains.Any().Get.ByID(ctx, id.String())
			}
			// A transaction of a signer not granted is not found: the redirect would name it.
			if err == nil && v.CanUse(tx.Signer) {
				http.Redirect(w, r, "/console/tx/"+id.String(), http.StatusSeeOther)
				return
			}
			if err != nil && !errors.Is(err, domain.ErrNotFound) {
				c.failed(w, r, v, err)
				return
			}
		}
	}
	txs, err := c.store.TxsByRequestID(ctx, q, pageRows)
	if err != nil {
		c.failed(w, r, v, err)
		return
	}
	var found []domain.ManagedTx
	for _, tx := range txs {
		if v.CanUse(tx.Signer) {
			found = append(found, tx)
		}
	}
	if len(found) == 1 {
		http.Redirect(w, r, "/console/tx/"+found[0].ID.String(), http.StatusSeeOther)
		return
	}
	status := http.StatusOK
	if len(found) == 0 {
		status = http.StatusNotFound
	}
	c.render(w, r, v, status, "search", map[string]any{"Query": q, "Found": found, "Searched": true})
}

// liveCompletion is what the page script adds to a page when a completion arrives.
type liveCompletion struct {
	TxID      string `json:"txId"`
	ChainID   uint64 `json:"chainId"`
	Signer    string `json:"signer"`
	Nonce     uint64 `json:"nonce"`
	Status    string `json:"status"`
	RequestID string `json:"requestId"`
	At        string `json:"at"`
}

// live long-polls the completions feed for the page script (readable by the viewer's
// signers only).
func (c *Console) live(w http.ResponseWriter, r *http.Request, v viewer) {
	wait := min(20*time.Second, c.completions.MaxWait())
	page, err := c.completions.List(r.Context(), r.URL.Query().Get("after"), 100, v.SignerFilter(), 0, wait)
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status, message := c.statusOf(r, err)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": message})
		return
	}
	out := struct {
		Items []liveCompletion `json:"items"`
		Next  string           `json:"next"`
	}{Items: []liveCompletion{}, Next: page.Next}
	for _, cm := range page.Completions {
		out.Items = append(out.Items, liveCompletion{TxID: cm.TxID.String(), ChainID: cm.ChainID, Signer: cm.Signer.Hex(), Nonce: cm.Nonce, Status: string(cm.Status),
			RequestID: cm.RequestID, At: cm.CompletedAt.UTC().Format(time.RFC3339)})
	}
	_ = json.NewEncoder(w).Encode(out)
}
