package chain

import "time"

// intervalMiner seals a block every interval until stopped. It owns exactly one goroutine,
// which Stop waits for, so a closed chain never has a seal in flight.
type intervalMiner struct {
	stop chan struct{}
	done chan struct{}
}

func startIntervalMiner(interval time.Duration, seal func()) *intervalMiner {
	m := &intervalMiner{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-ticker.C:
				seal()
			}
		}
	}()
	return m
}

// Stop must be called once; it returns after the goroutine has exited.
func (m *intervalMiner) Stop() {
	close(m.stop)
	<-m.done
}
