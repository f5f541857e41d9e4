// Package workerinit serves a sandbox worker from package initialisation.
//
// A program that serves its own workers (`caddy codemode-worker`) imports
// it for its side effect: in a process the pool started as a worker with
// that subcommand, its init serves the worker protocol and exits, so the
// rest of the program's package initialisation and its main never run. Go
// initialises this package soon after the sandbox and its imports, before
// packages a worker does not use (in a Caddy build some 90 of them: Caddy's
// commands and modules, OpenTelemetry exporters, this module's own) and
// before the program's command-line set-up; a worker then has initialised
// what the standalone `codemode-worker` program initialises, and more.
//
// Packages Go initialises earlier (in a Caddy build, chroma's lexers and
// the JSON Schema validator among them) still run: Go's order is fixed by
// imports and import paths.
package workerinit

import (
	"os"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/engine"
	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/internal/threads"
)

func init() {
	if os.Getenv(threads.WorkerEnvVar) != "1" || len(os.Args) != 2 || os.Args[1] != engine.WorkerCommandName {
		return
	}
	// Go runs package initialisation on the main goroutine locked to the
	// main thread: served there, every frame would wake that one thread.
	// The worker runs on a goroutine of its own, as from main.
	code := make(chan int)
	go func() { code <- engine.ServeWorkerStdio() }()
	os.Exit(<-code)
}

// CommandName is the argument a pool starts a worker program with
// (sandbox.WorkerCommandName).
const CommandName = engine.WorkerCommandName

// ServeStdio serves the worker protocol on stdin and stdout and returns the
// process exit code (sandbox.ServeWorkerStdio): the main of a worker
// program that imports nothing else of the sandbox, and so initialises no
// more than this package does (cmd/codemode-worker).
func ServeStdio() int { return engine.ServeWorkerStdio() }
