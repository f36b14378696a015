package chain

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestCallOrder(t *testing.T) {
	up := func(head uint64) EndpointHealth { return EndpointHealth{Reachable: true, Head: head} }
	down := EndpointHealth{Reachable: false, Head: 100}
	wrong := EndpointHealth{Reachable: true, Head: 100, WrongChain: true}
	tests := []struct {
		name      string
		endpoints []EndpointHealth
		maxLag    uint64
		want      []int
	}{
		{"one healthy", []EndpointHealth{up(10)}, 3, []int{0}},
		{"configured order among current ones", []EndpointHealth{up(10), up(11), up(9)}, 3, []int{0, 1, 2}},
		{"a lagging endpoint goes last", []EndpointHealth{up(90), up(100), up(99)}, 3, []int{1, 2, 0}},
		{"lagging ones by head, highest first", []EndpointHealth{up(80), up(100), up(90)}, 3, []int{1, 2, 0}},
		{"exactly maxLag behind is current", []EndpointHealth{up(97), up(100)}, 3, []int{0, 1}},
		{"unknown head counts as current", []EndpointHealth{up(0), up(100)}, 3, []int{0, 1}},
		{"unreachable left out", []EndpointHealth{down, up(100)}, 3, []int{1}},
		{"another chain left out, and its head ignored", []EndpointHealth{wrong, up(50)}, 3, []int{1}},
		{"nothing usable", []EndpointHealth{down, wrong}, 3, nil},
		{"unreachable head does not make others lag", []EndpointHealth{{Reachable: false, Head: 1000}, up(10)}, 3, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := callOrder(tc.endpoints, tc.maxLag); !slices.Equal(got, tc.want) {
				t.Fatalf("callOrder = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEndpointAnswered(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"success", nil, true},
		{"JSON-RPC error object", fmt.Errorf("estimate: %w", &jsonRPCError{Code: 3, Message: "execution reverted"}), true},
		{"classified revert", fmt.Errorf("%w: boom", services.ErrExecutionReverted), true},
		{"nonce too low", fmt.Errorf("%w: x", services.ErrNonceTooLow), true},
		{"not supported", services.ErrNotSupported, true},
		{"HTTP 503", rpc.HTTPError{StatusCode: 503, Status: "503 Service Unavailable"}, false},
		{"HTTP 429", fmt.Errorf("call: %w", rpc.HTTPError{StatusCode: 429}), false},
		{"deadline", fmt.Errorf("head: %w", errors.New("context deadline exceeded")), false},
		{"connection refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := endpointAnswered(tc.err); got != tc.want {
				t.Fatalf("endpointAnswered(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestEndpointNameHidesCredentials(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"https://mainnet.example.io/v3/0123456789abcdef", "0:https://mainnet.example.io/…"},
		{"http://127.0.0.1:8545", "0:http://127.0.0.1:8545"},
		{"http://127.0.0.1:8545/", "0:http://127.0.0.1:8545"},
		{"wss://node.example.com/ws?apikey=secret", "0:wss://node.example.com/…"},
		{"https://user:pass@node.example.com", "0:https://node.example.com"},
		{"/var/run/geth.ipc", "0:endpoint"},
	}
	for _, tc := range tests {
		if got := EndpointName(0, tc.raw); got != tc.want {
			t.Errorf("EndpointName(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestMergeBroadcastResults(t *testing.T) {
	known := fmt.Errorf("%w: already known", services.ErrKnownTransaction)
	underpriced := fmt.Errorf("%w: underpriced", services.ErrUnderpriced)
	other := errors.New("txpool is full")
	got := mergeBroadcastResults([][]error{
		{nil, underpriced, underpriced, other},
		{other, nil, known, other},
	})
	want := []error{nil, nil, known, other}
	for i := range want {
		if !errors.Is(got[i], want[i]) && got[i] != want[i] { //nolint:errorlint // nil entries compare as values
			t.Errorf("tx %d: merged %v, want %v", i, got[i], want[i])
		}
	}
}
