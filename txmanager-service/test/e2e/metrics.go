package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// ScrapeMetrics reads the Prometheus text page at url (ParseMetrics).
func ScrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(string(body)), nil
}

// ScrapeCounter reads an unlabelled counter or gauge from the Prometheus text page at url.
func ScrapeCounter(ctx context.Context, url, name string) (float64, error) {
	series, err := ScrapeMetrics(ctx, url)
	if err != nil {
		return 0, err
	}
	value, ok := series[name]
	if !ok {
		return 0, fmt.Errorf("%s not on %s", name, url)
	}
	return value, nil
}

// ParseMetrics reads a Prometheus text page into series -> value, each series written as
// the page writes it (`name` or `name{label="value",...}`). Comments, blank lines and
// samples whose value is not a number are left out; a sample's timestamp is ignored.
func ParseMetrics(page string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(page) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "{") {
			continue
		}
		// A label value may hold spaces, so a labelled series ends at its last '}'.
		end := strings.IndexByte(line, ' ')
		if strings.Contains(line, "{") {
			end = strings.LastIndexByte(line, '}') + 1
		}
		if end <= 0 || end >= len(line) {
			continue
		}
		fields := strings.Fields(line[end:])
		if len(fields) == 0 {
			continue
		}
		value, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		out[line[:end]] = value
	}
	return out
}
