package caddymodules

import (
	"os"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
	// A worker the pool starts as `caddy codemode-worker` is served from
	// workerinit's init, before the rest of Caddy initialises; the command
	// below serves the same worker otherwise (run by hand).
	_ "github.com/codemode-gateway/caddy-codemode/broker/sandbox/workerinit"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  sandbox.WorkerCommandName,
		Short: "Serves one sandbox worker process (started by the codemode app, not by hand)",
		Long: `
Runs one worker of the codemode sandbox's worker pool: it caps its own memory
(RLIMIT_DATA), then runs the JavaScript plans its parent sends over stdin and
stdout, one at a time. The codemode app starts these processes itself (the
sandbox "worker" adapter, the default); there is no reason to run it by hand.
Its stdout carries the binary protocol, so nothing else may write to it.`,
		Func: func(caddycmd.Flags) (int, error) {
			os.Exit(sandbox.ServeWorkerStdio())
			return 0, nil
		},
	})
}
