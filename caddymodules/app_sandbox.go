package caddymodules

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// sandboxState is what the area keeps at run time.
type sandboxState struct {
	engine sandbox.Engine
	key    string // the engine's component key
	// sanitize is the engine's sanitization policy, which the meta-tools
	// apply too unless their block sets its own.
	sanitize sandbox.Sanitization
}

// Engine returns the sandbox engine built from `sandbox` (the worker pool by
// default), for the broker and the meta-tools.
func (a *App) Engine() sandbox.Engine { return a.sandbox.engine }

// provisionSandbox loads the engine module (worker by default). Engines are
// components: a reload with the same sandbox block reuses the running one
// (warm workers, scripts in flight unaffected); a changed block builds a
// new one, and the old one drains (refuses new scripts, lets running ones
// finish up to their timeout plus grace) and stops when nothing uses it any
// more, a draining broker included.
func (a *App) provisionSandbox(ctx caddy.Context) error {
	raw, err := withInlineKey(a.SandboxRaw, "engine", EngineWorker)
	if err != nil {
		return fmt.Errorf("codemode: sandbox: %w", err)
	}
	a.SandboxRaw = raw
	mod, err := ctx.LoadModule(a, "SandboxRaw")
	if err != nil {
		return fmt.Errorf("codemode: sandbox: %w", err)
	}
	e, key := mod.(Engine).Engine()
	a.sandbox = sandboxState{engine: e, key: key}
	if p, ok := mod.(interface{ sanitization() sandbox.Sanitization }); ok {
		a.sandbox.sanitize = p.sanitization()
	}
	return nil
}

// withInlineKey returns the module object raw with key set to def when it
// has none (an absent object counts as empty), so that the JSON may leave
// a default module's name out, as the Caddyfile may.
func withInlineKey(raw json.RawMessage, key, def string) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, err
		}
	}
	if _, ok := obj[key]; ok {
		return raw, nil
	}
	obj[key], _ = json.Marshal(def)
	return json.Marshal(obj)
}

// parseSandbox parses the `sandbox` subdirective of the codemode global
// option into an engine module object. Syntax:
//
//	sandbox {
//		engine <worker|inprocess>         # default worker (alias: adapter)
//		trusted_callers                   # required by inprocess (see below)
//		preset <locked_down|secure|balanced|experimental>   # default secure
//		timeout <duration>                # vm.timeoutMs, waits included; default: preset
//		cpu_time <duration>               # running time, waits excluded; default: timeout
//		max_steps <n>                     # vm.maxSteps
//		max_tool_calls <n>
//		max_call_depth <n>
//		max_source_bytes <size>
//		max_nesting_depth <n>
//		max_result_bytes <size>
//		max_console_entries <n>
//		max_console_bytes <size>
//		allow_console                     # vm.allowConsole
//		memory <size>                     # per script / worker, e.g. 64MiB
//		pool {                            # worker engine only
//			min <n>                       # minSize, default 1
//			max <n>                       # maxSize, default 4
//			scale_up <fraction>           # scaleUpThreshold, default 0.75
//			scale_down <fraction>         # scaleDownThreshold, default 0.25
//			scale_interval <duration>     # scaleInterval, default 5s
//			queue_size <n>                # default 1000; -1 none
//			queue_timeout <duration>      # default 10s
//			max_message <size>            # default 8MiB
//			max_pending_calls <n>         # default 128
//			flood <n> <duration>          # default 10000 100ms
//			watchdog_grace <duration>     # default 1s
//			startup_timeout <duration>    # default 10s
//			max_executions <n>            # per worker, default 10000; -1 never
//			spare <n>                     # ready workers beyond those in use, default 1
//			command <program> [<args>...] # default: this binary codemode-worker
//			sessions_per_worker <n>       # scripts a worker hosts, default 64
//			max_workers <n>               # default max(max, 16)
//			session_memory <size>         # cap per hosted script, default 1MiB
//			max_running_per_principal <n> # default max - 1
//			max_sessions_per_principal <n> # default a quarter of the seats
//			max_queued_per_principal <n>  # default queue_size / 10
//		}
//		sanitization {
//			remove_stack_traces
//			remove_file_paths
//			remove_hosts
//			remove_env_values
//			remove_type_names
//		}
//	}
//
// Sizes take units (64MiB, 512KB, or plain bytes). With the worker engine
// the pool survives a config reload when the sandbox block is unchanged.
// The in-process engine cannot contain a hostile script (no heap limit in
// goja), so it refuses to load without trusted_callers.
func parseSandbox(d *caddyfile.Dispenser) (json.RawMessage, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	engine := EngineWorker
	var pool *SandboxPool
	trusted := false
	c := new(SandboxLimits)
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
		sub := d.Val()
		var err error
		switch sub {
		case "engine", "adapter":
			err = oneArg(d, &engine)
			switch {
			case err != nil:
			case engine == "worker_threads":
				engine = EngineWorker
			case engine != EngineWorker && engine != EngineInProcess:
				err = d.Errf("sandbox: %s: %q is not worker or inprocess", sub, engine)
			}
		case "preset":
			if err = oneArg(d, &c.Preset); err == nil {
				if _, perr := sandbox.Preset(c.Preset); perr != nil {
					err = d.Errf("sandbox: %v", perr)
				}
			}
		case "timeout":
			c.Timeout, err = sandboxDurationArg(d, sub)
		case "cpu_time":
			c.CPUTime, err = sandboxDurationArg(d, sub)
		case "trusted_callers":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			trusted = true
		case "max_steps":
			var n int
			n, err = sandboxIntArg(d, sub, 1)
			c.MaxSteps = int64(n)
		case "max_tool_calls":
			c.MaxToolCalls, err = sandboxIntArg(d, sub, 1)
		case "max_call_depth":
			c.MaxCallDepth, err = sandboxIntArg(d, sub, 1)
		case "max_nesting_depth":
			c.MaxNestingDepth, err = sandboxIntArg(d, sub, 1)
		case "max_console_entries":
			c.MaxConsoleEntries, err = sandboxIntArg(d, sub, 1)
		case "max_source_bytes":
			c.MaxSourceBytes, err = sandboxSizeIntArg(d, sub)
		case "max_result_bytes":
			c.MaxResultBytes, err = sandboxSizeIntArg(d, sub)
		case "max_console_bytes":
			c.MaxConsoleBytes, err = sandboxSizeIntArg(d, sub)
		case "memory":
			c.MemoryBytes, err = sandboxSizeArg(d, sub)
		case "allow_console":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			c.AllowConsole = true
		case "pool":
			pool, err = parseSandboxPool(d)
		case "sanitization":
			c.Sanitization, err = parseSandboxSanitization(d)
		default:
			return nil, d.Errf("sandbox: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if _, err := c.options(); err != nil {
		return nil, d.Errf("sandbox: %v", err)
	}
	if engine == EngineInProcess {
		if pool != nil {
			return nil, d.Errf("sandbox: pool applies to the %s engine only", EngineWorker)
		}
		if !trusted {
			return nil, d.Errf("sandbox: engine %s needs trusted_callers: %v", EngineInProcess, errUntrustedInProcess)
		}
		return caddyconfig.JSONModuleObject(&InProcessEngine{SandboxLimits: *c, TrustedCallers: true}, "engine", engine, nil), nil
	}
	if trusted {
		return nil, d.Errf("sandbox: trusted_callers applies to the %s engine only", EngineInProcess)
	}
	return caddyconfig.JSONModuleObject(&WorkerEngine{SandboxLimits: *c, Pool: pool}, "engine", engine, nil), nil
}

func parseSandboxPool(d *caddyfile.Dispenser) (*SandboxPool, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	p := new(SandboxPool)
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
		sub := d.Val()
		var err error
		switch sub {
		case "min":
			var n int
			if n, err = sandboxIntArg(d, sub, 0); err == nil {
				p.MinSize = &n
			}
		case "max":
			p.MaxSize, err = sandboxIntArg(d, sub, 1)
		case "scale_up":
			p.ScaleUpThreshold, err = sandboxFractionArg(d, sub)
		case "scale_down":
			p.ScaleDownThreshold, err = sandboxFractionArg(d, sub)
		case "scale_interval":
			p.ScaleInterval, err = sandboxDurationArg(d, sub)
		case "queue_size":
			p.QueueSize, err = sandboxCountOrNone(d, sub, "-1: no queue")
		case "queue_timeout":
			p.QueueTimeout, err = sandboxDurationArg(d, sub)
		case "max_message":
			p.MaxMessageBytes, err = sandboxSizeIntArg(d, sub)
		case "max_pending_calls":
			p.MaxPendingCalls, err = sandboxIntArg(d, sub, 1)
		case "flood":
			var n, dur string
			if !d.AllArgs(&n, &dur) {
				return nil, d.ArgErr()
			}
			if p.FloodMessages, err = strconv.Atoi(n); err != nil || p.FloodMessages < 1 {
				return nil, d.Errf("sandbox: pool: flood: %q is not a positive count", n)
			}
			var dd time.Duration
			if dd, err = caddy.ParseDuration(dur); err != nil || dd <= 0 {
				return nil, d.Errf("sandbox: pool: flood: %q is not a positive duration", dur)
			}
			p.FloodInterval = caddy.Duration(dd)
		case "watchdog_grace":
			p.WatchdogGrace, err = sandboxDurationArg(d, sub)
		case "startup_timeout":
			p.StartupTimeout, err = sandboxDurationArg(d, sub)
		case "max_executions":
			p.MaxExecutionsPerWorker, err = sandboxCountOrNone(d, sub, "-1: never recycled")
		case "sessions_per_worker":
			p.SessionsPerWorker, err = sandboxIntArg(d, sub, 1)
		case "max_workers":
			p.MaxWorkers, err = sandboxIntArg(d, sub, 1)
		case "session_memory":
			p.SessionMemoryBytes, err = sandboxSizeArg(d, sub)
		case "max_running_per_principal":
			p.MaxRunningPerPrincipal, err = sandboxIntArg(d, sub, 1)
		case "max_sessions_per_principal":
			p.MaxSessionsPerPrincipal, err = sandboxIntArg(d, sub, 1)
		case "max_queued_per_principal":
			p.MaxQueuedPerPrincipal, err = sandboxIntArg(d, sub, 1)
		case "spare":
			var n int
			if n, err = sandboxIntArg(d, sub, 0); err == nil {
				p.SpareWorkers = &n
			}
		case "command":
			p.Command = d.RemainingArgs()
			if len(p.Command) == 0 {
				return nil, d.ArgErr()
			}
		default:
			return nil, d.Errf("sandbox: pool: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	// Caught here, the error has a line and the Caddyfile's names (the
	// pool's own check at load speaks of minSize and maxSize).
	if p.MinSize != nil && p.MaxSize > 0 && *p.MinSize > p.MaxSize {
		return nil, d.Errf("sandbox: pool: min %d is above max %d", *p.MinSize, p.MaxSize)
	}
	return p, nil
}

func parseSandboxSanitization(d *caddyfile.Dispenser) (*SandboxSanitization, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	s := new(SandboxSanitization)
	seen := blockOptions{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if err := seen.once(d); err != nil {
			return nil, err
		}
		switch d.Val() {
		case "remove_stack_traces":
			s.RemoveStackTraces = true
		case "remove_file_paths":
			s.RemoveFilePaths = true
		case "remove_hosts":
			s.RemoveHosts = true
		case "remove_env_values":
			s.RemoveEnvValues = true
		case "remove_type_names":
			s.RemoveTypeNames = true
		default:
			return nil, d.Errf("sandbox: sanitization: unrecognized subdirective %q", d.Val())
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	return s, nil
}

func sandboxDurationArg(d *caddyfile.Dispenser, name string) (caddy.Duration, error) {
	var s string
	if err := oneArg(d, &s); err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(s)
	if err != nil || dur <= 0 {
		return 0, d.Errf("sandbox: %s: %q is not a positive duration", name, s)
	}
	return caddy.Duration(dur), nil
}

func sandboxIntArg(d *caddyfile.Dispenser, name string, least int) (int, error) {
	var s string
	if err := oneArg(d, &s); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		return 0, d.Errf("sandbox: %s: %q is not an integer of at least %d", name, s, least)
	}
	return n, nil
}

// sandboxCountOrNone reads a pool count where -1 means none and 0, JSON's
// absent value, the default: an explicit 0 would silently be the default,
// so it is refused, naming what -1 means.
func sandboxCountOrNone(d *caddyfile.Dispenser, name, none string) (int, error) {
	n, err := sandboxIntArg(d, name, -1)
	if err == nil && n == 0 {
		return 0, d.Errf("sandbox: %s: 0 is not a count (%s; leave the option out for its default)", name, none)
	}
	return n, err
}

func sandboxFractionArg(d *caddyfile.Dispenser, name string) (float64, error) {
	var s string
	if err := oneArg(d, &s); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, d.Errf("sandbox: %s: %q is not a fraction between 0 and 1", name, s)
	}
	if f == 0 {
		// The pool reads 0 as "not set": an explicit 0 would silently be
		// the default, as explicit 0 counts and durations would.
		hint := ""
		if name == "scale_down" {
			hint = "; to stop idle workers only when none is busy, write a fraction below 1/max such as 0.001"
		}
		return 0, d.Errf("sandbox: %s: %q is not a fraction above 0 (leave the option out for its default%s)", name, s, hint)
	}
	return f, nil
}

func sandboxSizeArg(d *caddyfile.Dispenser, name string) (int64, error) {
	var s string
	if err := oneArg(d, &s); err != nil {
		return 0, err
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > 1<<40 {
		return 0, d.Errf("sandbox: %s: %q is not a size such as 64MiB", name, s)
	}
	return int64(n), nil
}

func sandboxSizeIntArg(d *caddyfile.Dispenser, name string) (int, error) {
	n, err := sandboxSizeArg(d, name)
	if err == nil && n > 1<<30 {
		return 0, d.Errf("sandbox: %s: larger than 1GiB", name)
	}
	return int(n), err
}
