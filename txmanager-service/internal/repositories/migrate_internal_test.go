package repositories

import (
	"reflect"
	"testing"
)

func TestSplitSteps(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []migrationStep
	}{
		{
			name: "a file without markers is one step",
			body: "CREATE TABLE a (x int);\nCREATE TABLE b (y int);\n",
			want: []migrationStep{{sql: "CREATE TABLE a (x int);\nCREATE TABLE b (y int);"}},
		},
		{
			name: "text before the first marker is a step of its own",
			body: "-- header\nSELECT 1;\n-- txm:step\nSELECT 2;\n",
			want: []migrationStep{{sql: "-- header\nSELECT 1;"}, {sql: "SELECT 2;"}},
		},
		{
			name: "a comment-free header is dropped only when empty",
			body: "\n\n-- txm:step\nSELECT 1;\n",
			want: []migrationStep{{sql: "SELECT 1;"}},
		},
		{
			name: "no-transaction steps are marked, the ones after them are not",
			body: "-- txm:step\nALTER TABLE a ADD COLUMN c int;\n-- txm:step no-transaction\nCREATE INDEX CONCURRENTLY i ON a (c);\n  -- txm:step  \nALTER INDEX i RENAME TO j;\n",
			want: []migrationStep{
				{sql: "ALTER TABLE a ADD COLUMN c int;"},
				{sql: "CREATE INDEX CONCURRENTLY i ON a (c);", noTransaction: true},
				{sql: "ALTER INDEX i RENAME TO j;"},
			},
		},
		{
			name: "a marker with nothing after it adds no step",
			body: "SELECT 1;\n-- txm:step no-transaction\n\n",
			want: []migrationStep{{sql: "SELECT 1;"}},
		},
		{
			name: "an empty file has no steps",
			body: "",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitSteps(tt.body); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitSteps:\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}
