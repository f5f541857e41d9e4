// Command codemode-worker is a sandbox worker without Caddy: the same
// worker as `caddy codemode-worker`, in a program that contains only the
// sandbox. The pool runs it when its `command` names it:
//
//	sandbox {
//		pool {
//			command /usr/local/bin/codemode-worker
//		}
//	}
//
// Without Caddy's package initialisation (chroma's lexers, some 500
// modules) a worker is ready in about a third of the time and holds a third
// of the memory while idle (docs/figures.md, "sandbox A"). Build it from
// the same version as the gateway: the pool refuses a worker of another
// build (WORKER_STARTUP_FAILED).
package main

import (
	"fmt"
	"os"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox/workerinit"
)

func main() {
	// Like `caddy codemode-worker`, it takes no arguments but that name
	// (so that the same `command` line works with either program).
	if len(os.Args) > 2 || len(os.Args) == 2 && os.Args[1] != workerinit.CommandName {
		fmt.Fprintf(os.Stderr, "usage: %s\n\nServes one sandbox worker on stdin and stdout; the codemode app starts it\n(sandbox pool `command`), there is no reason to run it by hand.\n", os.Args[0])
		os.Exit(2)
	}
	os.Exit(workerinit.ServeStdio())
}
