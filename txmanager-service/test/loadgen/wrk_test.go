package loadgen

import (
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want Result
	}{
		{
			name: "clean run",
			out: `Running 1s test @ http://127.0.0.1:18999/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.15ms  709.23us   4.95ms   68.21%
    Req/Sec     0.91k    37.33     0.99k    70.00%
  Latency Distribution
     50%    2.24ms
     75%    2.60ms
     90%    2.96ms
     99%    3.70ms
  907 requests in 1.00s, 3.29MB read
Requests/sec:    906.78
`,
			want: Result{Requests: 907, Elapsed: time.Second, P50: 2240 * time.Microsecond, P99: 3700 * time.Microsecond, Max: 4950 * time.Microsecond},
		},
		{
			name: "failures",
			out: `    Latency   812.00us  100.00us    1.20s    90.00%
     50%  800.00us
     99%    1.10s
  10 requests in 2.00s, 1.00KB read
  Socket errors: connect 0, read 1, write 0, timeout 2
  Non-2xx or 3xx responses: 4
`,
			want: Result{Requests: 10, Elapsed: 2 * time.Second, P50: 800 * time.Microsecond, P99: 1100 * time.Millisecond,
				Max: 1200 * time.Millisecond, Failures: 7, FirstFail: "Socket errors: connect 0, read 1, write 0, timeout 2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseWrk(tc.out)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("parseWrk = %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := parseWrk("wrk: connection refused"); err == nil {
		t.Error("output without a request count parsed without an error")
	}
}
