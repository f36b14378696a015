package e2e

import (
	"bytes"
	"io"
	"net/http"
)

// ForwardJSONRPC passes a JSON-RPC request, whose body the caller has read, on to the node
// at target and the node's answer back through w: the core of the loopback proxies that
// tests and the fault-injection suite put in front of a chain. intercept, when set, runs
// once the node has answered; when it returns true it has replied to w itself and the
// answer is dropped.
func ForwardJSONRPC(w http.ResponseWriter, r *http.Request, target string, body []byte, intercept func() bool) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, target, bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	req.Header.Del("Accept-Encoding") // let the transport decompress, so the answer is forwarded plain
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if intercept != nil && intercept() {
		return
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}
