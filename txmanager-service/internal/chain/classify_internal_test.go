package chain

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

type rpcError struct {
	message string
	code    int
}

func (e rpcError) Error() string  { return e.message }
func (e rpcError) ErrorCode() int { return e.code }

func TestIsMethodNotFound(t *testing.T) {
	const method = "eth_getHeaderByNumber"
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"geth", rpcError{"the method eth_getHeaderByNumber does not exist/is not available", -32601}, true},
		{"code only", rpcError{"Method not found", -32601}, true},
		{"provider with another code", rpcError{"Unsupported method: eth_getHeaderByNumber", -32600}, true},
		{"method not found text", rpcError{"method not found", -32000}, true},
		{"wrapped", fmt.Errorf("latest block: %w", rpcError{"Method not found", -32601}), true},
		{"unknown block", rpcError{"Unknown block", -39001}, false},
		{"finalized not supported names no method", rpcError{"finalized block not supported", -32000}, false},
		{"another method refused", rpcError{"the method eth_getBlockReceipts does not exist/is not available", -32000}, false},
		{"transport error", errors.New("404 Not Found: method not found"), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isMethodNotFound(tc.err, method); got != tc.want {
				t.Errorf("isMethodNotFound(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The EVM's halts as each node words them for an estimate: all mean the intent cannot run.
func TestEstimateHaltsAreExecutionFailures(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"go-ethereum", rpcError{code: -32000, message: "invalid opcode: opcode 0xfe not defined"}},
		{"anvil, invalid opcode", rpcError{code: -32603, message: "EVM error InvalidFEOpcode"}},
		{"anvil, stack underflow", rpcError{code: -32603, message: "EVM error StackUnderflow"}},
		{"anvil, out of gas", rpcError{code: -32603, message: "EVM error OutOfGas(Basic)"}},
	}
	for _, tc := range tests {
		if got := classifyEstimateError(tc.err); !errors.Is(got, services.ErrExecutionReverted) {
			t.Errorf("%s: %v, want an execution failure", tc.name, got)
		}
	}
	if got := classifyEstimateError(errors.New("EVM error InvalidFEOpcode")); errors.Is(got, services.ErrExecutionReverted) {
		t.Errorf("a transport failure's text taken for the node's answer: %v", got)
	}
}

// An estimate that failed within a capped allowance is told apart, so the create can ask
// again without the cap: as each node words it.
func TestCappedEstimatesAreToldApart(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		reverted bool
		capped   bool
	}{
		{"go-ethereum, out of gas at the cap", rpcError{code: -32000, message: "gas required exceeds allowance (30000)"}, true, true},
		{"Erigon and Besu", rpcError{code: -32000, message: "gas required exceeds: 30000"}, true, true},
		{"a cap below the intrinsic gas", rpcError{code: -32000, message: "intrinsic gas too low: have 21000, want 21144"}, false, true},
		{"a revert that says so", rpcError{code: 3, message: "execution reverted: gas required exceeds allowance"}, true, false},
		{"a transport failure's text", errors.New("intrinsic gas too low"), false, false},
	}
	for _, tc := range tests {
		got := classifyEstimateError(tc.err)
		if errors.Is(got, services.ErrExecutionReverted) != tc.reverted || errors.Is(got, services.ErrGasCapped) != tc.capped {
			t.Errorf("%s: %v, want reverted %t capped %t", tc.name, got, tc.reverted, tc.capped)
		}
	}
}
