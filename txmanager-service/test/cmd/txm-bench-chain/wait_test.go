package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// waitAllConfirmed ends when the transfers are final, and says why when they cannot all be
// confirmed: a FAILED_FINAL one, one never final, or fewer transfers than it waits for.
func TestWaitAllConfirmed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		states  []string // one transfer "bench-<i>" in each state
		want    int
		wantErr string // "" when the wait succeeds
	}{
		{name: "all confirmed", states: []string{"CONFIRMED", "CONFIRMED", "CONFIRMED"}, want: 3},
		{name: "one failed final", states: []string{"CONFIRMED", "FAILED_FINAL", "CONFIRMED"}, want: 3, wantErr: "1 transactions FAILED_FINAL"},
		{name: "one failed final while another is open", states: []string{"TRACKING", "FAILED_FINAL"}, want: 2, wantErr: "1 transactions FAILED_FINAL"},
		{name: "one never final", states: []string{"CONFIRMED", "TRACKING"}, want: 2, wantErr: "1 transactions not final"},
		{name: "fewer transfers than awaited", states: []string{"CONFIRMED", "CONFIRMED"}, want: 3, wantErr: "nothing left open, but 2 of 3 transfers confirmed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, testsupport.MigratedDSN(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close(context.Background()) })
			for i, state := range tc.states {
				insertTransfer(t, conn, i, state)
			}
			// Long enough for the full count that catches a FAILED_FINAL among open ones.
			waitCtx, cancel := context.WithTimeout(ctx, fullCountEvery+2*time.Second)
			defer cancel()
			looks := 0
			err = waitAllConfirmed(waitCtx, conn, measuredPrefix, tc.want, func() { looks++ })
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("wait: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("wait: %v, want an error with %q", err, tc.wantErr)
			case looks == 0:
				t.Fatal("each was never called")
			}
		})
	}
}

// insertTransfer writes transfer i of the measured run in state, final or not as the
// schema's check constraint has it.
func insertTransfer(t *testing.T, conn *pgx.Conn, i int, state string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `INSERT INTO managed_tx
		(tx_id, chain_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (gen_random_uuid(), 1337, '0x01', $1, '\x00', $2, '{}', $3, 1,
		        CASE WHEN $3 IN ('ALLOCATED', 'TRACKING', 'STUCK') THEN NULL ELSE now() END)`,
		measuredPrefix+strconv.Itoa(i), i, state)
	if err != nil {
		t.Fatalf("insert %s transfer: %v", state, err)
	}
}
