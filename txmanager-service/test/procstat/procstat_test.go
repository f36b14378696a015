package procstat

import (
	"os"
	"testing"
	"time"
)

func TestStatSeconds(t *testing.T) {
	cases := []struct {
		name    string
		stat    string
		want    float64
		wantErr bool
	}{
		{name: "plain", stat: "1234 (geth) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0", want: 3.25},
		{name: "name with spaces and parentheses", stat: "77 (postgres: (x) y) R 1 77 77 0 -1 4194304 5 0 0 0 1 2 0 0 20 0 1 0", want: 0.03},
		{name: "no command name", stat: "77 postgres R 1", wantErr: true},
		{name: "too short", stat: "77 (x) R 1 2 3", wantErr: true},
		{name: "times not numbers", stat: "77 (x) R 1 1 1 0 -1 0 0 0 0 0 a b 0 0 20 0 1 0", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statSeconds(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %v s, want %v s", got, tc.want)
			}
		})
	}
}

// This process's own account reads and grows with work, and the machine's busy and
// stolen times stay within its total (or, without /proc/stat, nothing is reported).
func TestProcessAndMachineTimes(t *testing.T) {
	_, statErr := os.Stat("/proc/stat")
	machineBefore, ok := Machine()
	if statErr != nil {
		if ok {
			t.Fatal("Machine() reported times without /proc/stat")
		}
		return
	}
	before, err := ProcessSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Busy until the account moves (it counts in ticks of 10 ms), for at most 5 s.
	spin, after, deadline := 0, before, time.Now().Add(5*time.Second)
	for after <= before && time.Now().Before(deadline) {
		for i := range 10_000_000 {
			spin ^= i
		}
		if after, err = ProcessSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if after <= before {
		t.Fatalf("CPU seconds stayed at %v over 5 s of a busy loop (%d)", after, spin)
	}
	machineAfter, ok := Machine()
	if !ok || machineBefore.Total == 0 || machineAfter.Total < machineBefore.Total || machineAfter.Busy < machineBefore.Busy ||
		machineAfter.Busy-machineBefore.Busy > machineAfter.Total-machineBefore.Total || machineAfter.Steal > machineAfter.Busy {
		t.Fatalf("machine times %+v -> %+v: want readable times whose busy part grows no faster than the total, steal within busy", machineBefore, machineAfter)
	}
}
