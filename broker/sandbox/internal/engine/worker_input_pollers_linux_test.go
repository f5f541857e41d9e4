package engine

import (
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWorkerInputIntermittentPollers: several scripts that poll in bursts
// and pause (in and out of their park grace, so the reading passes between
// them and the serve loop at every moment), while the parent writes in
// pieces of random sizes with random pauses, some frames larger than the
// buffer: every frame is dispatched once, in order, whoever reads it
// (TestWorkerInputServesEveryFrameOnce has one poller that never pauses).
func TestWorkerInputIntermittentPollers(t *testing.T) {
	for round := range 5 {
		wi, w, served, _ := inputUnderTest(t, 1<<20)
		const frames = 2000
		var stream []byte
		for i := uint64(1); i <= frames; i++ {
			data := `"x"`
			if i%300 == 0 {
				data = `"` + strings.Repeat("y", 70<<10) + `"`
			}
			stream = append(stream, resultFrame(t, i, data)...)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(round*10 + g)))
				for !stop.Load() {
					for n := rng.Intn(50); n > 0; n-- {
						wi.poll()
					}
					time.Sleep(time.Duration(rng.Intn(200)) * time.Microsecond)
				}
			}(g)
		}
		rng := rand.New(rand.NewSource(int64(round)))
		for off := 0; off < len(stream); {
			end := min(off+1+rng.Intn(3000), len(stream))
			if _, err := w.Write(stream[off:end]); err != nil {
				t.Fatal(err)
			}
			off = end
			if rng.Intn(4) == 0 {
				time.Sleep(time.Duration(rng.Intn(100)) * time.Microsecond)
			}
		}
		// The pollers stop with the last write: what they leave is the
		// serve loop's to read.
		stop.Store(true)
		wg.Wait()
		for i := uint64(1); i <= frames; i++ {
			select {
			case got := <-served:
				if got != i {
					t.Fatalf("round %d: frame %d dispatched as number %d", round, got, i)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: frame %d never dispatched (missed=%v)", round, i, wi.missed.Load())
			}
		}
		select {
		case got := <-served:
			t.Fatalf("frame %d dispatched twice", got)
		default:
		}
	}
}
