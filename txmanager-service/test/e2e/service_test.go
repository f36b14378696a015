package e2e

import "testing"

func TestServiceEnvDropsConfigVariables(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "DATABASE_URL=postgres://elsewhere", "HOME=/root", "CHAIN_RPC_URL=http://mainnet"}
	got := serviceEnv(base)
	want := []string{"PATH=/bin", "HOME=/root"}
	if len(got) != len(want) {
		t.Fatalf("serviceEnv = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("serviceEnv[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}
