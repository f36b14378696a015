package main

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

func TestSealOnCommand(t *testing.T) {
	cases := []struct {
		name    string
		input   string
		seals   int
		wantErr string
	}{
		{name: "one block a line", input: "seal\nseal\nseal\n", seals: 3},
		{name: "blank lines and spaces ignored", input: "\n  seal \n\nseal", seals: 2},
		{name: "no input, no block", input: "", seals: 0},
		{name: "an unknown command stops the chain's input", input: "seal\nmine\nseal\n", seals: 1, wantErr: `unknown command "mine"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seals := 0
			err := sealOnCommand(strings.NewReader(tc.input), func() common.Hash { seals++; return common.Hash{} })
			if seals != tc.seals {
				t.Errorf("sealed %d blocks, want %d", seals, tc.seals)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
