package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// LogSummary counts a service log's lines by level and groups its warnings and errors by
// message, so a run that passed can still show that the service complained on the way.
type LogSummary struct {
	Levels map[string]int
	// Problems are the WARN, ERROR and FATAL messages, most frequent first.
	Problems []LogProblem
	// Other counts lines that are not JSON log entries (the start-up banner, a panic).
	Other int
}

// LogProblem is one distinct warning or error message.
type LogProblem struct {
	Level string
	Msg   string
	Count int
	// Example is the error field of the first occurrence, if any.
	Example string
}

// ScanLogFile summarises the log at path.
func ScanLogFile(path string) (LogSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return LogSummary{}, fmt.Errorf("scan log: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	return ScanLog(f)
}

// ScanLog summarises the service's JSON-lines log ({"level":..., "msg":..., ...}).
func ScanLog(r io.Reader) (LogSummary, error) {
	s := LogSummary{Levels: map[string]int{}}
	index := map[string]int{}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" {
			continue
		}
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Error any    `json:"error"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &entry) != nil || entry.Level == "" {
			s.Other++
			continue
		}
		s.Levels[entry.Level]++
		switch entry.Level {
		case "WARN", "ERROR", "FATAL":
		default:
			continue
		}
		key := entry.Level + "\x00" + entry.Msg
		i, ok := index[key]
		if !ok {
			i = len(s.Problems)
			index[key] = i
			p := LogProblem{Level: entry.Level, Msg: entry.Msg}
			if entry.Error != nil {
				p.Example = fmt.Sprint(entry.Error)
			}
			s.Problems = append(s.Problems, p)
		}
		s.Problems[i].Count++
	}
	if err := scanner.Err(); err != nil {
		return s, fmt.Errorf("scan log: %w", err)
	}
	slices.SortStableFunc(s.Problems, func(a, b LogProblem) int { return b.Count - a.Count })
	return s, nil
}
