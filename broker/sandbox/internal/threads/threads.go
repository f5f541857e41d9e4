// Package threads makes the Go runtime start OS threads ahead of need and
// keep them idle for reuse.
//
// A sandbox worker caps its data segment (RLIMIT_DATA) at its size at the
// handshake plus its memory limit. Every thread the runtime starts later
// maps a stack (8 MiB each in a cgo build) under that cap, so a thread the
// collector or a blocking system call needs while a script fills its
// memory would fail to start and kill the worker on the wrong error; the
// threads started here count in the base instead. In a process the pool
// started as a worker they start during package initialisation, while the
// rest of the program initialises: this package imports only the standard
// library, so Go initialises it among the first.
package threads

import (
	"os"
	"runtime"
	"sync"
)

// WorkerEnvVar marks a process started as a sandbox worker by the pool: the
// same variable as the sandbox's workerEnvVar (a test checks it).
const WorkerEnvVar = "CODEMODE_SANDBOX_WORKER"

// Spare is how many threads a worker starts beyond GOMAXPROCS: the
// collector, the timer and the system calls of scripts blocked in tools.
const Spare = 6

var (
	early  sync.WaitGroup
	earlyN int
)

func init() {
	if runtime.GOOS == "linux" && os.Getenv(WorkerEnvVar) == "1" {
		earlyN = runtime.GOMAXPROCS(0) + Spare
		early.Add(1)
		go func() {
			defer early.Done()
			Prewarm(earlyN)
		}()
	}
}

// Ensure returns once the runtime has started n threads and holds them idle:
// at once, or after the start begun during initialisation, when that one
// asked for as many; otherwise it starts them now.
func Ensure(n int) {
	early.Wait()
	if n > earlyN {
		Prewarm(n)
	}
}

// Prewarm makes the runtime start n OS threads and keep them idle: each of
// n goroutines holds a thread of its own until all of them do (a goroutine
// locked to its thread parks the thread with it, so the next one needs a
// new thread), then lets go.
func Prewarm(n int) {
	var started sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			started.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
}
