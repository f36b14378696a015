package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/test/runcost"
)

// The recorder takes profiles one after another until stopped and keeps each; the top of
// them merged names the functions that ran.
func TestProfileRecorderTakesConsecutiveProfiles(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") == "" {
			http.NotFound(w, r)
			return
		}
		served.Add(1)
		time.Sleep(20 * time.Millisecond)
		_ = pprof.Lookup("heap").WriteTo(w, 0) // any valid profile will do for the recorder
	}))
	defer server.Close()
	dir := t.TempDir()
	recorder := startProfile(context.Background(), server.URL, dir)
	// Until a second profile was asked for, however slowly this machine serves them.
	for deadline := time.Now().Add(10 * time.Second); served.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	files, err := recorder.stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 || int(served.Load()) != len(files) {
		t.Fatalf("%d profiles kept of %d served, want every one of at least 2", len(files), served.Load())
	}
	for _, f := range files {
		if info, err := os.Stat(f); err != nil || info.Size() == 0 || filepath.Dir(f) != dir {
			t.Errorf("profile %s: %v, want a non-empty file in %s", f, err, dir)
		}
	}
	top, err := runcost.ProfileTop(context.Background(), files, 5, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(top, "flat") {
		t.Errorf("top has no table:\n%s", top)
	}
}

func TestProfileRecorderReportsAServiceWithoutProfiles(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(http.NotFoundHandler())
	defer server.Close()
	recorder := startProfile(context.Background(), server.URL, t.TempDir())
	time.Sleep(50 * time.Millisecond) // the first request has been answered
	files, err := recorder.stop()
	if err == nil || len(files) != 0 {
		t.Fatalf("files %v, err %v; want no profile and an error", files, err)
	}
	if _, err := runcost.ProfileTop(context.Background(), nil, 5, false); err == nil {
		t.Fatal("top of no profiles: want an error")
	}
}

// allocateForTheProfile allocates mib MB in blocks the sampler cannot miss, and keeps none
// of it.
//
//go:noinline
func allocateForTheProfile(mib int) int {
	total := 0
	for range mib {
		block := make([]byte, 1<<20)
		total += len(block)
	}
	return total
}

// allocateBeforeTheRun is the same, called before the run's first profile.
//
//go:noinline
func allocateBeforeTheRun(mib int) int { return allocateForTheProfile(mib) }

// The run's allocations are the difference of two allocation profiles: a function that
// allocated between them heads the top, and what was allocated before the first is not
// counted.
func TestAllocationsOfTheRunAreTheDifferenceOfTwoProfiles(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/allocs" {
			http.NotFound(w, r)
			return
		}
		runtime.GC() // the profile counts allocations up to the last collection
		_ = pprof.Lookup("allocs").WriteTo(w, 0)
	}))
	defer server.Close()
	dir := t.TempDir()
	before := allocateBeforeTheRun(128)
	start, err := allocationsSince(context.Background(), server.URL, dir, "allocs-start")
	if err != nil {
		t.Fatal(err)
	}
	allocated := allocateForTheProfile(64)
	end, err := allocationsSince(context.Background(), server.URL, dir, "allocs-end")
	if err != nil {
		t.Fatal(err)
	}
	top, err := runcost.AllocationTop(context.Background(), start, end, 5)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for line := range strings.Lines(top) {
		if fields := strings.Fields(line); len(fields) == 6 && strings.HasSuffix(fields[0], "B") {
			first = fields[5]
			break
		}
	}
	if !strings.HasSuffix(first, ".allocateForTheProfile") {
		t.Fatalf("the top's first entry is %q, want allocateForTheProfile (%d bytes):\n%s", first, allocated, top)
	}
	if strings.Contains(top, "allocateBeforeTheRun") {
		t.Fatalf("the top counts the %d bytes allocated before the run's first profile:\n%s", before, top)
	}
	if _, err := allocationsSince(context.Background(), server.URL+"/missing", dir, "x"); err == nil || !strings.Contains(err.Error(), "allocation profile") {
		t.Fatalf("a service without profiles: %v, want an error naming the allocation profile", err)
	}
}
