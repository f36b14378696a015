package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/test/runcost"
)

// profileChunkSeconds is how long each CPU profile the recorder takes lasts: the run ends
// at most this long before the last one does.
const profileChunkSeconds = 2

// profileRecorder takes the service's CPU profile (/debug/pprof/profile) in consecutive
// chunks from start until stop, since how long a run takes is known only at its end.
type profileRecorder struct {
	dir    string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	files  []string
	err    error
	done   chan struct{}
}

func startProfile(ctx context.Context, baseURL, dir string) *profileRecorder {
	ctx, cancel := context.WithCancel(ctx)
	p := &profileRecorder{dir: dir, cancel: cancel, done: make(chan struct{})}
	p.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-p.done:
				return
			default:
			}
			file := filepath.Join(dir, fmt.Sprintf("cpu-%03d.pprof", i))
			if err := fetchProfile(ctx, "CPU profile", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", baseURL, profileChunkSeconds), file); err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			p.files = append(p.files, file)
			p.mu.Unlock()
		}
	})
	return p
}

// fetchProfile saves the profile the service serves at url (what names it in errors) to file.
func fetchProfile(ctx context.Context, what, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// stop lets the chunk under way finish and returns the profiles taken.
func (p *profileRecorder) stop() ([]string, error) {
	close(p.done)
	p.wg.Wait()
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.files, p.err
}

// allocationsSince saves the service's allocation profile (/debug/pprof/allocs, counted
// since it started) to name.pprof in dir; two of them, at the run's start and end, give what
// the run itself allocated (AllocationTop takes the first as its base).
func allocationsSince(ctx context.Context, baseURL, dir, name string) (string, error) {
	file := filepath.Join(dir, name+".pprof")
	return file, fetchProfile(ctx, "allocation profile", baseURL+"/debug/pprof/allocs", file)
}

// nodeProfiler takes geth's own CPU profile over a run (debug_startCPUProfile, written by
// the node to a file), so the node's cost in the service's run can be set beside its cost in
// the baseline: what the service's calls (receipts, heads, fees, balances) add to taking the
// transfers in. nil profiles nothing.
type nodeProfiler struct {
	url, dir string
}

// start has the node profile itself into name.pprof until the returned stop; stop prints the
// top of the profile.
func (p *nodeProfiler) start(ctx context.Context, name string) (stop func()) {
	if p == nil {
		return func() {}
	}
	file := filepath.Join(p.dir, "node-"+name+".pprof")
	client, err := rpc.DialContext(ctx, p.url)
	if err != nil {
		fmt.Printf("    node profile: %v\n", err)
		return func() {}
	}
	if err := client.CallContext(ctx, nil, "debug_startCPUProfile", file); err != nil {
		client.Close()
		fmt.Printf("    node profile: %v\n", err)
		return func() {}
	}
	return func() {
		defer client.Close()
		if err := client.CallContext(ctx, nil, "debug_stopCPUProfile"); err != nil {
			fmt.Printf("    node profile: %v\n", err)
			return
		}
		runcost.PrintProfileTops(ctx, os.Stdout, "geth's CPU profile", "", []string{file}, topFunctions)
	}
}
