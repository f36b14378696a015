package loadgen

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// WrkConfig is a load run by wrk, a C load generator that costs the machine far less CPU
// per request than a Go HTTP client, so more of it is left to the server under test.
type WrkConfig struct {
	Base        string // http://host:port
	Path        string
	Concurrency int
	Threads     int
	Duration    time.Duration
	// BodyTemplate is the JSON body with %d where a per-request counter goes.
	BodyTemplate string
}

// WrkAvailable reports whether wrk is installed.
func WrkAvailable() (string, bool) {
	path, err := exec.LookPath("wrk")
	return path, err == nil
}

// RunWrk runs wrk and parses its summary.
func RunWrk(ctx context.Context, wrkPath string, cfg WrkConfig) (Result, error) {
	before, after, ok := strings.Cut(cfg.BodyTemplate, "%d")
	if !ok {
		return Result{}, fmt.Errorf("body template needs a %%d")
	}
	script := fmt.Sprintf(`wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format(nil, %q, nil, %q .. (counter * 1000 + math.random(0, 999)) .. %q)
end
`, cfg.Path, before, after)
	dir, err := os.MkdirTemp("", "wrk-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	scriptPath := filepath.Join(dir, "create.lua")
	if err := os.WriteFile(scriptPath, []byte(script), 0o600); err != nil {
		return Result{}, err
	}
	threads := max(cfg.Threads, 1)
	cmd := exec.CommandContext(ctx, wrkPath, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(cfg.Concurrency),
		"-d", fmt.Sprintf("%ds", max(int(cfg.Duration.Seconds()), 1)), "--latency", "-s", scriptPath, cfg.Base)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Result{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	return parseWrk(string(out))
}

var (
	wrkTotal    = regexp.MustCompile(`(\d+) requests in ([\d.]+)(ms|s|m)`)
	wrkLatency  = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)`)
	wrkMax      = regexp.MustCompile(`(?m)^\s+Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s|m)\s`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSockErrs = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

func parseWrk(out string) (Result, error) {
	var res Result
	m := wrkTotal.FindStringSubmatch(out)
	if m == nil {
		return res, fmt.Errorf("unexpected wrk output: %s", out)
	}
	res.Requests, _ = strconv.Atoi(m[1])
	res.Elapsed = parseWrkDuration(m[2], m[3])
	for _, lm := range wrkLatency.FindAllStringSubmatch(out, -1) {
		d := parseWrkDuration(lm[2], lm[3])
		if lm[1] == "50" {
			res.P50 = d
		} else {
			res.P99 = d
		}
	}
	if mm := wrkMax.FindStringSubmatch(out); mm != nil {
		res.Max = parseWrkDuration(mm[1], mm[2])
	}
	if n := wrkNon2xx.FindStringSubmatch(out); n != nil {
		res.Failures, _ = strconv.Atoi(n[1])
		res.FirstFail = "non-2xx responses"
	}
	if e := wrkSockErrs.FindStringSubmatch(out); e != nil {
		for _, v := range e[1:] {
			n, _ := strconv.Atoi(v)
			res.Failures += n
		}
		res.FirstFail = strings.TrimSpace(e[0])
	}
	return res, nil
}

func parseWrkDuration(value, unit string) time.Duration {
	f, _ := strconv.ParseFloat(value, 64)
	scale := time.Second
	switch unit {
	case "us":
		scale = time.Microsecond
	case "ms":
		scale = time.Millisecond
	case "m":
		scale = time.Minute
	}
	// wrk prints two decimals; rounding keeps float noise out of the reported figures.
	return time.Duration(math.Round(f*float64(scale)/float64(time.Microsecond))) * time.Microsecond
}
