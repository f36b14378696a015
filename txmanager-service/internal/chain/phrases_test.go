package chain_test

import (
	"bufio"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// clientPhrase is one row of docs/chains.md: a message as a node client formats it and the
// class the classifier must give it.
type clientPhrase struct {
	line            int
	class, client   string
	message, source string
}

// chainsTable reads the table of docs/chains.md, the one place each client's wording and
// its source are written down.
func chainsTable(t *testing.T) []clientPhrase {
	t.Helper()
	path := filepath.Join("..", "..", "..", "docs", "chains.md")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []clientPhrase
	scanner := bufio.NewScanner(f)
	for n := 1; scanner.Scan(); n++ {
		cells := strings.Split(scanner.Text(), "|")
		if len(cells) != 6 || !strings.HasPrefix(strings.TrimSpace(cells[3]), "`") {
			continue
		}
		rows = append(rows, clientPhrase{line: n, class: strings.TrimSpace(cells[1]), client: strings.TrimSpace(cells[2]),
			message: strings.Trim(strings.TrimSpace(cells[3]), "`"), source: strings.TrimSpace(cells[4])})
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 40 {
		t.Fatalf("%s: %d rows read; the table was not found", path, len(rows))
	}
	return rows
}

// The classes as docs/chains.md names them.
var classByName = map[string]error{
	"already known":      services.ErrKnownTransaction,
	"nonce too low":      services.ErrNonceTooLow,
	"underpriced":        services.ErrUnderpriced,
	"insufficient funds": services.ErrInsufficientFunds,
	"nonce gap":          services.ErrNonceGap,
	"pool full":          services.ErrPoolFull,
	"above node fee cap": services.ErrAboveNodeFeeCap,
	"not mineable":       services.ErrNotMineable,
	"L1 gas short":       services.ErrL1GasShort,
	"unknown answer":     services.ErrUnknownAnswer,
}

// Every client's wording of every answer, as docs/chains.md lists it with its source, is
// read as the class the table gives it; every class of the outcome table has rows there.
func TestEveryClientsPhrasesClassify(t *testing.T) {
	rows := chainsTable(t)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	seen := map[error]bool{}
	for _, row := range rows {
		want, known := classByName[row.class]
		if !known {
			t.Errorf("docs/chains.md:%d: class %q is not one of %v", row.line, row.class, classByName)
			continue
		}
		if row.source == "" || row.client == "" {
			t.Errorf("docs/chains.md:%d: a row needs its client and its source", row.line)
		}
		seen[want] = true
		// As every node sends it: a JSON-RPC error object (-32000, "server error"), about a
		// plain transfer. Its gas covers what the EVM charges before it runs in the rows of
		// a gas limit short of the L1 part, and falls short of it in the others: the same
		// words are read against the transaction.
		gas := uint64(20_000)
		if want == services.ErrL1GasShort { //nolint:errorlint // which sentinel, compared as values
			gas = 21_000
		}
		_, raw := signTx(t, key, txParams{to: &to, value: big.NewInt(1), gas: gas, feeCap: big.NewInt(1e9), tipCap: big.NewInt(1)})
		got := chain.ClassifySendErrorOf(raw, codedError{message: row.message, code: -32000})
		class := services.AnswerClassOf(got)
		if class != want { //nolint:errorlint // which sentinel, compared as values
			t.Errorf("docs/chains.md:%d: %s answers %q: classified %v, the table says %s", row.line, row.client, row.message, class, row.class)
		}
	}
	for _, answer := range services.ChainAnswers() {
		if answer.Class != nil && !seen[answer.Class] {
			t.Errorf("the outcome table's class %v has no client's wording in docs/chains.md", answer.Class)
		}
	}
	// The clients the wordings come from: each row names one or several ("geth, reth").
	// "Nethermind, older" is Nethermind's earlier wording; "Nitro" is Arbitrum Nitro.
	clients := map[string]bool{}
	for _, row := range rows {
		for name := range strings.SplitSeq(row.client, ",") {
			switch name = strings.TrimSpace(name); name {
			case "", "older":
			case "Nitro":
				clients["Arbitrum Nitro"] = true
			default:
				clients[name] = true
			}
		}
	}
	if len(rows) < 60 || len(clients) < 9 {
		t.Errorf("%d wordings from %d clients; the table is meant to cover at least 60 from 9", len(rows), len(clients))
	}
	t.Logf("%d wordings from %d clients (%v) classified as docs/chains.md says", len(rows), len(clients), slices.Sorted(maps.Keys(clients)))
}
