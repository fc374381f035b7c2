package progress

import (
	"sync"
	"time"
)

// Every reports msg's event every interval (> 0) until the returned stop is called: a step that
// works a long time with nothing new to say (a Go build of Kubernetes, debootstrap) still tells
// people that it runs, for how long, and what is left. It depends on nothing but the clock, not
// on the work printing anything. stop waits until no event is being reported, so nothing beats
// after it returns.
func Every(r Reporter, interval time.Duration, msg func(elapsed time.Duration) Event) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r(msg(time.Since(start)))
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
