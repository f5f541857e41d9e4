// Package prelude holds the sandbox's script prelude (the JavaScript every
// fresh runtime runs first) and its compiled program.
//
// It is a package of its own, importing only goja, so that a sandbox worker
// process can compile the prelude while the rest of the program is still
// being initialised: Go initialises a package as soon as its imports are,
// and this one comes right after goja, well before the sandbox package
// (which waits for zap, Prometheus and the others). A Caddy-binary worker
// spends some 30 ms in package initialisation on one thread; compiling the
// 52 KB prelude (~4 ms) on another CPU meanwhile takes it off the worker's
// path to ready.
package prelude

import (
	"os"
	"sync"

	"github.com/dop251/goja"
)

// Program is Source compiled, once per process.
var Program = sync.OnceValue(func() *goja.Program {
	return goja.MustCompile("prelude.js", Source, true)
})

// WorkerEnvVar marks a process started as a sandbox worker by the pool: the
// same variable as the sandbox's workerEnvVar (a test checks it).
const WorkerEnvVar = "CODEMODE_SANDBOX_WORKER"

// init starts the compilation in a sandbox worker, which needs the program
// before its handshake. Other processes (Caddy itself, the tools) compile
// it on first use, if ever.
func init() {
	if os.Getenv(WorkerEnvVar) == "1" {
		go Program()
	}
}
