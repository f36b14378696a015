package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

type feedPage struct {
	Completions []struct {
		TxID   string `json:"txId"`
		Cursor string `json:"cursor"`
	} `json:"completions"`
	Next string `json:"next"`
}

// feedPage reads one page; it reports errors instead of failing t, since readers run on
// goroutines of their own.
func (s *testService) feedPage(ctx context.Context, query string) (feedPage, time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.httpURL+"/api/v1/tx/completions?"+query, nil)
	if err != nil {
		return feedPage{}, time.Time{}, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return feedPage{}, time.Time{}, err
	}
	defer resp.Body.Close()
	at := time.Now()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return feedPage{}, at, fmt.Errorf("feed %s: %d %s", query, resp.StatusCode, raw)
	}
	var page feedPage
	err = json.Unmarshal(raw, &page)
	return page, at, err
}

// A long-poll (?wait=) answers as soon as a completion is positioned, not at the end of its
// wait: within 200 ms.
func TestFeedLongPollAnswersPromptly(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{fastPipeline: true})
	start, _, err := s.feedPage(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		page feedPage
		at   time.Time
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		page, at, err := s.feedPage(t.Context(), "after="+start.Next+"&wait=25s")
		answers <- answer{page, at, err}
	}()
	time.Sleep(300 * time.Millisecond)
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 1), "value": "1", "gasLimit": 21000})
	var a answer
	select {
	case a = <-answers:
	case <-time.After(40 * time.Second):
		t.Fatal("the long-poll never answered")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.page.Completions) != 1 || a.page.Completions[0].TxID != id {
		t.Fatalf("long-poll answered %+v, want the new completion", a.page)
	}
	var positionedAt time.Time
	if err := s.pool.QueryRow(context.Background(), "SELECT positioned_at FROM tx_completions WHERE tx_id = $1", id).Scan(&positionedAt); err != nil {
		t.Fatal(err)
	}
	late := a.at.Sub(positionedAt)
	t.Logf("long-poll answered %s after the completion was positioned", late.Round(time.Millisecond))
	if late > 200*time.Millisecond {
		t.Fatalf("long-poll answered %s after the completion was positioned, want at most 200ms", late)
	}
}

// The stream delivers each completion once across a reconnect that resumes from the
// cursor of the last completion received.
func TestWatchCompletionsResumesAcrossAReconnect(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{fastPipeline: true})
	var ids []string
	for i := range 12 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%2), "to": devAddress(t, 3), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	seen := map[string]int{}
	cursor := ""
	receive := func(n int) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stream, err := s.grpc.WatchCompletions(ctx, &v1.WatchCompletionsRequest{After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			c, err := stream.Recv()
			if err != nil {
				t.Fatalf("stream after %d completions: %v", len(seen), err)
			}
			seen[c.GetTxId()]++
			cursor = c.GetCursor()
		}
		// Dropped mid-stream: the next connection resumes from cursor.
	}
	receive(5)
	receive(len(ids) - 5)
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("completion %s delivered %d times (all: %v)", id, seen[id], seen)
		}
	}
}

// A transaction held open in another database of the same cluster (a stranger on a shared
// Supabase cluster) does not hold the feed back: 500 transactions are created, confirmed
// and served while it stays open. TXM_FOREIGN_HOLD (e.g. 5m) spreads the creates over that
// long and keeps the stranger's transaction open all the while; by default they go at once.
func TestFeedIgnoresForeignTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var hold time.Duration
	if v := os.Getenv("TXM_FOREIGN_HOLD"); v != "" {
		var err error
		if hold, err = time.ParseDuration(v); err != nil {
			t.Fatalf("TXM_FOREIGN_HOLD=%q: %v", v, err)
		}
	}
	heldSince := time.Now()
	foreign := pgtest.NewPool(t, pgtest.NewDatabase(t))
	holder, err := foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "CREATE TABLE held (id int); INSERT INTO held VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{fastPipeline: true})
	served := map[string]time.Time{}
	done := make(chan error, 1)
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		cursor := ""
		deadline := time.Now().Add(hold + 3*time.Minute)
		for len(served) < 500 && time.Now().Before(deadline) {
			page, at, err := s.feedPage(readCtx, "limit=1000&wait=5s&after="+cursor)
			if err != nil {
				done <- err
				return
			}
			for _, c := range page.Completions {
				served[c.TxID] = at
			}
			if page.Next != "" {
				cursor = page.Next
			}
		}
		done <- nil
	}()
	for i := range 500 {
		s.createOK(t, map[string]any{"signer": devAddress(t, i%4), "to": devAddress(t, 6), "value": fmt.Sprint(i + 1), "gasLimit": 21000})
		time.Sleep(hold / 500)
	}
	if err := <-done; err != nil {
		t.Fatalf("feed reader: %v", err)
	}
	if len(served) != 500 {
		t.Fatalf("the feed served %d of 500 completions while a foreign transaction stayed open", len(served))
	}
	if err := holder.QueryRow(ctx, "SELECT 1").Scan(new(int)); err != nil {
		t.Fatalf("the foreign transaction is no longer open: %v", err)
	}
	rows, err := s.pool.Query(ctx, "SELECT tx_id::text, completed_at FROM tx_completions")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var delays []time.Duration
	for rows.Next() {
		var id string
		var completed time.Time
		if err := rows.Scan(&id, &completed); err != nil {
			t.Fatal(err)
		}
		delays = append(delays, served[id].Sub(completed))
	}
	slices.Sort(delays)
	t.Logf("final -> served with a foreign transaction open for %s: p50 %s, p99 %s, max %s",
		time.Since(heldSince).Round(time.Second), delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)*99/100].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond))
}
