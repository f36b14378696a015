package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// csvColumns are the columns a send file may have; signer and requestId are required.
var csvColumns = []string{"signer", "requestId", "to", "value", "data", "gasLimit", "maxFeePerGas", "maxPriorityFeePerGas", "chainId"}

func newSendCommand(o *options) *cobra.Command {
	var file string
	var wait bool
	cmd := &cobra.Command{
		Use:   "send --file <payouts.csv> [--wait]",
		Short: "create every transaction of a CSV file, 1,000 a call (exit 0 all accepted, 4 some refused)",
		Long: `Create every transaction of a CSV file, in batches of up to 1,000 creates a call. The
first line names the columns: signer and requestId are required; to, value (wei),
data (0x-hex), gasLimit, maxFeePerGas, maxPriorityFeePerGas and chainId are optional.
Every line is answered on its own: created, replayed (the request id was sent before),
or refused with its reason; sending the file again replays what was created. With --wait
it then waits until every accepted transaction is final and lists the lines that did not
end CONFIRMED. With --json every line's answer is one JSON object a line (JSON Lines), and
with --wait each accepted line again with its final state. Exit 0 when every line was
accepted (and, with --wait, CONFIRMED), 6 when a line is to be sent again, else 4 when one
was refused, else 8 when one failed on chain.`,
		Args: exactArgs(0, "no arguments (the file is --file)"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := os.Open(file)
			if err != nil {
				return &usageError{fmt.Sprintf("tx send: %v", err)}
			}
			defer func() { _ = f.Close() }()
			reqs, lines, err := readSendFile(f, o.chainID)
			if err != nil {
				return &usageError{fmt.Sprintf("tx send: %s: %v", file, err)}
			}
			ctx, cancel := o.deadline(cmd.Context(), 0)
			defer cancel()
			results, err := o.client.CreateMany(ctx, reqs)
			if err != nil && len(results) == 0 {
				return err
			}
			refused, unsent := 0, 0
			var accepted []sentLine
			out := newSendOutput(o)
			for i, r := range results {
				line := sentLine{Phase: "answered", Line: lines[i], RequestID: reqs[i].GetRequestId()}
				switch again, _ := txmclient.Retryable(r.Err); {
				case errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded):
					// The command ended (--timeout, an interrupt) with the line's call in
					// flight or not yet made: it may have been created. Sending the file
					// again sends it or replays it.
					unsent++
					line.Result, line.SendAgain, line.Message = "not known, send again", true, "no answer before the command ended"
				case r.Err != nil && again:
					// Still refused for now after every attempt (or, OUTCOME_UNKNOWN, perhaps
					// created): sending the file again sends or replays it.
					unsent++
					line.Result, line.SendAgain = "not sent, send again", true
					line.Reason, line.Message = refusal(r.Err)
				case r.Err != nil:
					refused++
					line.Result = "refused"
					line.Reason, line.Message = refusal(r.Err)
				default:
					line.Result = "created"
					if !r.Response.GetCreated() {
						line.Result = "replayed"
					}
					tx := r.Response.GetTx()
					line.TxID, line.Nonce, line.State = tx.GetTxId(), nonceText(tx), tx.GetState()
					if line.Nonce == "-" && o.json {
						line.Nonce = "" // none yet: left out
					}
					accepted = append(accepted, line)
				}
				if err := out.answered(line); err != nil {
					return err
				}
			}
			if err := out.flush(); err != nil {
				return err
			}
			out.summary("%d lines: %d accepted, %d refused, %d not sent\n", len(results), len(accepted), refused, unsent)
			if err != nil {
				return err
			}
			if wait && len(accepted) > 0 {
				ids := make([]string, len(accepted))
				for i, line := range accepted {
					ids[i] = line.TxID
				}
				txs, werr := o.client.WaitMany(ctx, ids, 64)
				confirmed := 0
				final := newFinalOutput(o)
				for i, line := range accepted {
					if txs[i].GetState() == "CONFIRMED" {
						confirmed++
					}
					if err := final.final(line, txs[i]); err != nil {
						return err
					}
				}
				if err := final.flush(); err != nil {
					return err
				}
				// Not confirmed: final otherwise, or not known to be final (its wait failed).
				failed := len(accepted) - confirmed
				out.summary("final: %d confirmed, %d not\n", confirmed, failed)
				if werr != nil {
					return werr
				}
				if failed > 0 && unsent == 0 && refused == 0 {
					return &quietError{code: exitTxFailed}
				}
			}
			// Lines not sent first, with --wait too: sending the file again is what they
			// need, and it only replays the accepted lines and refuses the refused ones
			// again. The final table above says which lines failed on chain.
			if unsent > 0 {
				return &quietError{code: exitUnavailable}
			}
			if refused > 0 {
				return &quietError{code: exitRefused}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "the CSV file of creates")
	cmd.Flags().BoolVar(&wait, "wait", false, "then wait until every accepted transaction is final")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// refusal is the service's reason and message for a line, or the error itself when no
// answer of the service's came back (the connection failed).
func refusal(err error) (reason, message string) {
	if se := kerrors.FromError(err); se.Reason != "" {
		return se.Reason, se.Message
	}
	return "", err.Error()
}

// sentLine is what became of one line of a send file; with --json, one JSON object a line.
type sentLine struct {
	// Phase is "answered" for the create's answer, "final" for the state it ended in.
	Phase     string `json:"phase"`
	Line      int    `json:"line"`
	RequestID string `json:"requestId"`
	// Result is created, replayed, refused, or "not sent, send again" / "not known, send
	// again" (SendAgain: sending the file again sends or replays it).
	Result    string `json:"result"`
	SendAgain bool   `json:"sendAgain,omitempty"`
	TxID      string `json:"txId,omitempty"`
	Nonce     string `json:"nonce,omitempty"`
	State     string `json:"state,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	// Final is the state the accepted line's transaction ended in (--wait), or empty with
	// WaitError when its wait failed.
	Final     string `json:"final,omitempty"`
	WaitError string `json:"waitError,omitempty"`
}

// sendOutput prints each line's answer: a table, or JSON Lines with --json.
type sendOutput struct {
	o     *options
	table *table
}

func newSendOutput(o *options) *sendOutput {
	out := &sendOutput{o: o}
	if !o.json {
		out.table = newTable(o.out, "LINE", "REQUEST ID", "RESULT", "TX ID", "NONCE", "STATE OR REASON")
	}
	return out
}

func (s *sendOutput) answered(line sentLine) error {
	if s.o.json {
		return writeJSONValue(s.o.out, line)
	}
	detail := line.State
	switch {
	case line.Reason != "":
		detail = line.Reason + ": " + line.Message
	case line.Message != "":
		detail = line.Message
	}
	s.table.row(strconv.Itoa(line.Line), line.RequestID, line.Result, orDash(line.TxID), orDash(line.Nonce), detail)
	return nil
}

func (s *sendOutput) flush() error {
	if s.table == nil {
		return nil
	}
	return s.table.flush()
}

// summary prints a count line (not in JSON: a script counts the lines itself).
func (s *sendOutput) summary(format string, args ...any) {
	if !s.o.json {
		fmt.Fprintf(s.o.out, format, args...)
	}
}

// finalOutput prints the accepted lines' final states after --wait: a table of those not
// CONFIRMED (which payout failed, and why), or with --json every accepted line again with
// its final state.
type finalOutput struct {
	o     *options
	table *table
}

func newFinalOutput(o *options) *finalOutput { return &finalOutput{o: o} }

func (f *finalOutput) final(line sentLine, tx *v1.Tx) error {
	line.Phase = "final"
	if tx == nil {
		line.WaitError = "not known to be final: its wait failed"
	} else {
		line.Final = tx.GetState()
		if tx.GetSubState() != "" {
			line.Final += "/" + tx.GetSubState()
		}
	}
	if f.o.json {
		return writeJSONValue(f.o.out, line)
	}
	if tx != nil && tx.GetState() == "CONFIRMED" {
		return nil
	}
	if f.table == nil {
		f.table = newTable(f.o.out, "LINE", "REQUEST ID", "TX ID", "FINAL STATE", "LAST ERROR")
	}
	f.table.row(strconv.Itoa(line.Line), line.RequestID, line.TxID, orDash(line.Final), orDash(tx.GetLastError()+line.WaitError))
	return nil
}

func (f *finalOutput) flush() error {
	if f.table == nil {
		return nil
	}
	return f.table.flush()
}

// nonceText is a transaction's nonce, or "-" while it waits for approval without one.
func nonceText(tx *v1.Tx) string {
	if tx.GetState() == "AWAITING_APPROVAL" {
		return "-"
	}
	return strconv.FormatUint(tx.GetNonce(), 10)
}

// readSendFile reads a send file's creates and the line each starts on (a file may have
// blank lines, and a quoted cell may span lines); a line it cannot read is named with its
// number.
func readSendFile(r io.Reader, chainID uint64) ([]*v1.CreateTxRequest, []int, error) {
	// A spreadsheet's "CSV UTF-8" starts with a byte order mark. It goes before the reader
	// sees the first cell: in front of a quoted header ("signer",...) it makes the quote a
	// bare one, and the whole file is refused.
	buffered := bufio.NewReader(r)
	if mark, err := buffered.Peek(3); err == nil && string(mark) == "\ufeff" {
		_, _ = buffered.Discard(3)
	}
	rd := csv.NewReader(buffered)
	rd.TrimLeadingSpace = true
	header, err := rd.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil, errors.New("empty: the first line names the columns (signer,requestId,to,value,...)")
	}
	if err != nil {
		return nil, nil, err
	}
	headerLine, _ := rd.FieldPos(0)
	index := map[string]int{}
	for i, name := range header {
		name = strings.TrimSpace(name)
		if !slices.Contains(csvColumns, name) {
			return nil, nil, fmt.Errorf("line %d: unknown column %q (columns: %s)", headerLine, name, strings.Join(csvColumns, ","))
		}
		if _, twice := index[name]; twice {
			return nil, nil, fmt.Errorf("line %d: column %q twice", headerLine, name)
		}
		index[name] = i
	}
	for _, required := range []string{"signer", "requestId"} {
		if _, ok := index[required]; !ok {
			return nil, nil, fmt.Errorf("line %d: the column %s is required", headerLine, required)
		}
	}
	var out []*v1.CreateTxRequest
	var lines []int
	for {
		record, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		line, _ := rd.FieldPos(0)
		cell := func(name string) string {
			if i, ok := index[name]; ok && i < len(record) {
				return strings.TrimSpace(record[i])
			}
			return ""
		}
		req := &v1.CreateTxRequest{Signer: cell("signer"), RequestId: cell("requestId"), To: cell("to"), Value: cell("value"), Data: cell("data"),
			MaxFeePerGas: cell("maxFeePerGas"), MaxPriorityFeePerGas: cell("maxPriorityFeePerGas"), ChainId: chainID}
		if req.Signer == "" || req.RequestId == "" {
			return nil, nil, fmt.Errorf("line %d: signer and requestId are required", line)
		}
		for _, n := range []struct {
			name string
			into *uint64
		}{{"gasLimit", &req.GasLimit}, {"chainId", &req.ChainId}} {
			if v := cell(n.name); v != "" {
				if *n.into, err = strconv.ParseUint(v, 10, 64); err != nil {
					return nil, nil, fmt.Errorf("line %d: %s %q is not a whole number", line, n.name, v)
				}
			}
		}
		out, lines = append(out, req), append(lines, line)
	}
	if len(out) == 0 {
		return nil, nil, errors.New("no creates after the header line")
	}
	return out, lines, nil
}
