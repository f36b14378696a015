package e2e

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"syscall"
	"time"
)

// Process is a program a tool starts and owns, for programs this package has no type of
// its own for (the payouts example): a direct child that a goroutine waits for, with its
// output appended to a log, that dies with this process.
type Process struct {
	proc      *child
	announced string
}

// ProcessOptions describes one life of a program.
type ProcessOptions struct {
	Name    string
	Bin     string
	Args    []string
	Env     []string
	LogPath string
	// Stdin, when set, is the program's standard input (a password it prompts for).
	Stdin io.Reader
	// Announce matches the line the program writes once it serves; its first submatch (the
	// address it bound on port 0) is Announced.
	Announce *regexp.Regexp
	// Timeout bounds the wait for that line; 0 means 60 s.
	Timeout time.Duration
}

// StartProcess starts the program and waits until this life announces itself.
func StartProcess(ctx context.Context, opts ProcessOptions) (*Process, error) {
	proc, err := startChildWithInput(opts.Name, opts.LogPath, opts.Env, nil, opts.Stdin, opts.Bin, opts.Args...)
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	announced, err := waitForAnnouncement(ctx, proc, "its address", func(line string) (string, bool) {
		m := opts.Announce.FindStringSubmatch(line)
		if len(m) < 2 {
			return "", false
		}
		return m[1], true
	})
	if err != nil {
		proc.kill()
		return nil, fmt.Errorf("%s: %w", opts.Name, err)
	}
	return &Process{proc: proc, announced: announced}, nil
}

// Announced is what the program announced (the first submatch of ProcessOptions.Announce).
func (p *Process) Announced() string { return p.announced }

// Kill ends the process as a crash would and waits until it is gone.
func (p *Process) Kill() { p.proc.kill() }

// Stop asks for a graceful exit (SIGTERM) and kills after grace.
func (p *Process) Stop(grace time.Duration) error { return p.proc.stop(syscall.SIGTERM, grace) }

// Interrupt asks for a graceful exit with SIGINT, for programs that treat SIGTERM as a
// crash (clef exits cleanly only on an interrupt), and kills after grace.
func (p *Process) Interrupt(grace time.Duration) error { return p.proc.stop(syscall.SIGINT, grace) }

// LogTail is the last lines of the process's log, for error messages.
func (p *Process) LogTail(lines int) string { return tailFile(p.proc.logPath, lines) }
