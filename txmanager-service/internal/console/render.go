package console

import (
	"html/template"
	"io/fs"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// pageNames are the templates under templates/, each rendered inside layout.html.
var pageNames = []string{"login", "problem", "overview", "signer", "tx", "stuck", "quarantines", "approvals", "audit", "search"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"gwei":  gwei,
		"ether": ether,
		"short": short,
		"when": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				if v.IsZero() {
					return "—"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			case *time.Time:
				if v == nil {
					return "—"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			}
			return "—"
		},
		"ago": func(seconds float64) string {
			if seconds <= 0 {
				return "—"
			}
			return (time.Duration(seconds) * time.Second).String()
		},
		"stateClass": stateClass,
		"wei": func(v *big.Int) string {
			if v == nil {
				return "—"
			}
			return v.String()
		},
		"hex": func(h any) string {
			switch v := h.(type) {
			case interface{ Hex() string }:
				return v.Hex()
			}
			return ""
		},
		"hashOf": func(tx domain.ManagedTx) string {
			if tx.TxHash == nil {
				return ""
			}
			return tx.TxHash.Hex()
		},
		"add": func(a, b int) int { return a + b },
		"dict": func(kv ...any) map[string]any {
			out := make(map[string]any, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				key, _ := kv[i].(string)
				out[key] = kv[i+1]
			}
			return out
		},
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// short keeps the start and end of a long hex string, the whole of it in a title.
func short(s string) string {
	if len(s) <= 14 {
		return s
	}
	return s[:8] + "…" + s[len(s)-4:]
}

// stateClass colours a state: green when it ended well, red when not, amber for waiting.
func stateClass(state any) string {
	var s string
	switch v := state.(type) {
	case domain.State:
		s = string(v)
	case domain.ApprovalState:
		s = string(v)
	case string:
		s = v
	}
	switch s {
	case "CONFIRMED", "ADMITTED", "APPROVED":
		return "ok"
	case "FAILED_FINAL", "STUCK", "REJECTED", "EXPIRED", "REFUSED":
		return "bad"
	}
	return "warn"
}

// assetServer serves the embedded stylesheet and script.
func assetServer() http.Handler {
	sub, err := fs.Sub(files, ".")
	if err != nil {
		panic(err) // the embedded tree always has its root
	}
	fileServer := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		fileServer.ServeHTTP(w, r)
	})
}
