package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func newTxCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "tx", Short: "transactions: send (a CSV file), get, by-request, wait"}
	get := &cobra.Command{
		Use:   "get <txId>",
		Short: "show a transaction",
		Args:  exactArgs(1, "a transaction id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			tx, err := o.client.Get(ctx, args[0])
			if err != nil {
				return err
			}
			return o.printTx(tx)
		},
	}
	var signer, requestID string
	byRequest := &cobra.Command{
		Use:   "by-request --signer <address> --request-id <id>",
		Short: "show the transaction a signer's request id created",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			tx, err := o.client.GetByRequestOnChain(ctx, o.chainID, signer, requestID)
			if err != nil {
				return err
			}
			return o.printTx(tx)
		},
	}
	requestFlags(byRequest, &signer, &requestID, true)
	var waitSigner, waitRequestID string
	wait := &cobra.Command{
		Use:   "wait <txId> | wait --signer <address> --request-id <id>",
		Short: "wait until a transaction is final and show it (exit 0 CONFIRMED, 8 FAILED_FINAL or never sent, 7 --timeout passed)",
		Long: `Wait until a transaction is CONFIRMED or FAILED_FINAL and show it. The service holds
each call open until then (a long-poll), so nothing polls. An intent waiting for approval
is waited for through its approval: it may end without a nonce (EXPIRED, REJECTED,
REFUSED). Without --timeout it waits as long as it takes; exit code 0 when it is
CONFIRMED, 8 when it FAILED_FINAL or ended without being sent, 7 when --timeout passed
first.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			byID := len(args) == 1 && waitSigner == "" && waitRequestID == ""
			byReq := len(args) == 0 && waitSigner != "" && waitRequestID != ""
			if !byID && !byReq {
				return &usageError{"tx wait: give a transaction id, or --signer and --request-id"}
			}
			ctx, cancel := o.deadline(cmd.Context(), 0)
			defer cancel()
			var tx *v1.Tx
			var err error
			if byID {
				tx, err = o.client.Wait(ctx, args[0])
			} else {
				tx, err = o.client.WaitByRequest(ctx, o.chainID, waitSigner, waitRequestID)
			}
			if err != nil {
				return err
			}
			if err := o.printTx(tx); err != nil {
				return err
			}
			if tx.GetState() != "CONFIRMED" {
				return &quietError{code: exitTxFailed}
			}
			return nil
		},
	}
	requestFlags(wait, &waitSigner, &waitRequestID, false)
	cmd.AddCommand(newSendCommand(o), get, byRequest, wait)
	return cmd
}

func requestFlags(cmd *cobra.Command, signer, requestID *string, required bool) {
	cmd.Flags().StringVar(signer, "signer", "", "the signer's address")
	cmd.Flags().StringVar(requestID, "request-id", "", "the request id the create was sent with")
	if required {
		_ = cmd.MarkFlagRequired("signer")
		_ = cmd.MarkFlagRequired("request-id")
	}
}

func (o *options) printTx(tx *v1.Tx) error {
	if o.json {
		return writeJSON(o.out, tx)
	}
	return txFields(o.out, tx)
}

func txFields(w io.Writer, tx *v1.Tx) error {
	block := ""
	if r := tx.GetReceipt(); r != nil {
		block = fmt.Sprintf("%d (status %d, gas used %d)", r.GetBlockNumber(), r.GetStatus(), r.GetGasUsed())
		if fee := r.GetFee(); fee != "" {
			block += fmt.Sprintf(", fee %s wei at %s wei/gas", fee, r.GetEffectiveGasPrice())
			if l1 := r.GetL1Fee(); l1 != "" {
				block += ", L1 fee " + l1 + " wei included"
			}
		}
	}
	return fields(w,
		"tx id", tx.GetTxId(),
		"state", joinState(tx.GetState(), tx.GetSubState()),
		"chain", fmt.Sprint(tx.GetChainId()),
		"signer", tx.GetSigner(),
		"nonce", fmt.Sprint(tx.GetNonce()),
		"request id", tx.GetRequestId(),
		"to", tx.GetTo(),
		"value", tx.GetValue(),
		"tx hash", tx.GetTxHash(),
		"block", block,
		"attempts", fmt.Sprint(tx.GetSubmitAttempts()),
		"last error", tx.GetLastError(),
		"created", when(tx.GetCreatedAt()),
		"confirmed", when(tx.GetConfirmedAt()),
	)
}

func joinState(state, sub string) string {
	if sub == "" {
		return state
	}
	return state + " (" + sub + ")"
}
