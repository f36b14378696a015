package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	kerrors "github.com/go-kratos/kratos/v2/errors"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// act carries out one operator action through the API's controllers: the same
// authorisation, forwarding to the signer's owner and audit record as the API call.
func (c *Console) act(w http.ResponseWriter, r *http.Request, v viewer) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, v, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !c.seal.validCSRF(v.session.ID, r.PostFormValue("csrf")) {
		c.problem(w, r, v, http.StatusForbidden, "The form did not carry this session's token; load the page again.")
		return
	}
	// As the API refuses it: no text column can hold a NUL, and the write would fail.
	for name, values := range r.PostForm {
		if slices.ContainsFunc(values, func(s string) bool { return strings.ContainsRune(s, 0) }) {
			c.problem(w, r, v, http.StatusBadRequest, "The field "+strconv.Quote(name)+" holds a NUL character, which no text field may.")
			return
		}
	}
	ctx, cancel := requestContext(r, v)
	defer cancel()
	form := r.PostFormValue
	back := safeNext(form("back"))
	note := strings.TrimSpace(form("note"))
	var (
		done string
		err  error
	)
	switch action := form("action"); action {
	case "pause":
		_, err = c.admin.PauseSigner(ctx, &v1.PauseSignerRequest{Signer: form("signer"), Note: note})
		done = "Paused " + form("signer") + ": it takes no new creates."
	case "resume":
		_, err = c.admin.ResumeSigner(ctx, &v1.PauseSignerRequest{Signer: form("signer"), Note: note})
		done = "Resumed " + form("signer") + "."
	case "retire":
		_, err = c.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: form("signer"), Note: note})
		done = "Retiring " + form("signer") + ": it finishes what it holds and takes nothing new."
	case "release":
		chainID, perr := strconv.ParseUint(form("chain"), 10, 64)
		if perr != nil {
			c.problem(w, r, v, http.StatusBadRequest, "The chain id must be a number.")
			return
		}
		var q *v1.Quarantine
		q, err = c.admin.ReleaseSigner(ctx, &v1.ReleaseSignerRequest{Signer: form("signer"), ChainId: chainID, Note: note})
		if err == nil {
			done = "Released " + form("signer") + "."
			if q.GetQuarantined() {
				done = "Release of " + form("signer") + " recorded: it serves again once its recovery has recorded what the chain shows."
			}
		}
	case "resolve":
		if seen, ok := r.PostForm["seen"]; ok {
			// The form names the attempt it was shown with: a second submit (a double click,
			// the back button, a replayed request) after the first resolution signed a new
			// attempt would sign yet another, at a higher fee, which nobody looked at.
			current, gerr := c.tx.GetTx(ctx, &v1.GetTxRequest{TxId: form("tx")})
			if gerr == nil && current.GetTxHash() != seen[0] {
				http.Redirect(w, r, c.withFlash(v, back, "error", "The transaction has changed since the page was shown (its current attempt is "+
					orNone(current.GetTxHash())+", state "+current.GetState()+"): look at it again before resolving it."), http.StatusSeeOther)
				return
			}
		}
		var resp *v1.ResolveTxResponse
		resp, err = c.admin.ResolveTx(ctx, &v1.ResolveTxRequest{TxId: form("tx"), Action: form("resolution"), Reason: note})
		if err == nil {
			done = "Resolution " + resp.GetAction() + " sent for " + form("tx") + "."
		}
	case "approve", "reject":
		req := &v1.DecideApprovalRequest{ApprovalId: form("approval"), Note: note}
		if action == "approve" {
			_, err = c.tx.ApproveTx(ctx, req)
		} else {
			_, err = c.tx.RejectTx(ctx, req)
		}
		done = "Your " + action + " of " + form("approval") + " is recorded."
	default:
		c.problem(w, r, v, http.StatusBadRequest, "Unknown action.")
		return
	}
	if err != nil {
		se := kerrors.FromError(err)
		// A refusal of the caller or a failure is a page of its own; a conflict or a bad
		// value goes back to the page it came from, said in one line.
		if se.Code == http.StatusForbidden || se.Code == http.StatusUnauthorized || se.Code < 400 || se.Code >= 500 {
			c.problem(w, r, v, int(se.Code), se.Reason+": "+se.Message)
			return
		}
		http.Redirect(w, r, c.withFlash(v, back, "error", se.Reason+": "+se.Message), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, c.withFlash(v, back, "done", done), http.StatusSeeOther)
}

// withFlash adds a one-line message to the page the browser goes back to, signed for the
// viewer's session (render shows only such messages).
func (c *Console) withFlash(v viewer, back, key, message string) string {
	u, err := url.Parse(back)
	if err != nil {
		return Path
	}
	q := u.Query()
	q.Del("done")
	q.Del("error")
	q.Set(key, message)
	q.Set("flash", c.seal.flashMAC(v.session.ID, key, message))
	u.RawQuery = q.Encode()
	return u.String()
}

// orNone is a value, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
