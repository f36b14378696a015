package repositories

import (
	"strings"
	"testing"
)

func TestReplicationOf(t *testing.T) {
	tests := []struct {
		commit, standbys string
		want             string
	}{
		{"on", "FIRST 1 (node_2)", ReplicationSynchronous},
		{"remote_apply", "*", ReplicationSynchronous},
		{"remote_write", "ANY 1 (a, b)", ReplicationSynchronous},
		{"on", "", ReplicationAsynchronous},
		{"local", "node_2", ReplicationAsynchronous},
		{"off", "node_2", ReplicationAsynchronous},
	}
	for _, tc := range tests {
		r := replicationOf(tc.commit, tc.standbys)
		if r.Mode != tc.want {
			t.Errorf("synchronous_commit=%s standbys=%q: %s, want %s", tc.commit, tc.standbys, r.Mode, tc.want)
		}
		if !strings.Contains(r.Describe(), "synchronous_commit="+tc.commit) {
			t.Errorf("description %q does not name the setting", r.Describe())
		}
	}
	if d := (Replication{Mode: ReplicationUnknown}).Describe(); !strings.HasPrefix(d, "unknown") {
		t.Errorf("unknown described as %q", d)
	}
}
