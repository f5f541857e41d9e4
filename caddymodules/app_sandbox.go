package caddymodules

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

// Sandbox adapters.
const (
	// SandboxAdapterWorker runs scripts in memory-capped worker processes
	// (the default).
	SandboxAdapterWorker = "worker"
	// SandboxAdapterInProcess runs scripts in the Caddy process: faster to
	// start, but it cannot cap memory; for trusted code and tests.
	SandboxAdapterInProcess = "inprocess"
)

// SandboxConfig is the `sandbox` part of the codemode app: the engine that
// runs meta:execute and broker scripts. Limits left unset come from the
// preset.
type SandboxConfig struct {
	// Adapter is "worker" (default: a pool of worker processes, each
	// capping its own memory) or "inprocess" (no memory cap). The spec's
	// "worker_threads" is accepted as "worker".
	Adapter string `json:"adapter,omitempty"`

	// Preset is the base of every limit (vm.preset): locked_down (2 s),
	// secure (3.5 s, default), balanced (5 s) or experimental (30 s).
	Preset string `json:"preset,omitempty"`

	// Timeout overrides the preset's wall-clock limit of one script
	// (vm.timeoutMs).
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// MaxSteps overrides the preset's loop-step limit (vm.maxSteps).
	MaxSteps int64 `json:"max_steps,omitempty"`
	// MaxToolCalls overrides the preset's tool calls per script.
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxCallDepth overrides the preset's JavaScript call stack depth.
	MaxCallDepth int `json:"max_call_depth,omitempty"`
	// MaxSourceBytes overrides the preset's script size limit, in bytes.
	MaxSourceBytes int `json:"max_source_bytes,omitempty"`
	// MaxNestingDepth overrides the preset's syntax nesting limit.
	MaxNestingDepth int `json:"max_nesting_depth,omitempty"`
	// MaxResultBytes overrides the preset's result size limit, in bytes.
	MaxResultBytes int `json:"max_result_bytes,omitempty"`
	// MaxConsoleEntries overrides the preset's console entry budget.
	MaxConsoleEntries int `json:"max_console_entries,omitempty"`
	// MaxConsoleBytes overrides the preset's console byte budget.
	MaxConsoleBytes int `json:"max_console_bytes,omitempty"`
	// AllowConsole captures console.* into the result's logs
	// (vm.allowConsole). Default false.
	AllowConsole bool `json:"allow_console,omitempty"`
	// MemoryBytes is the memory of one script, in bytes: the engine's
	// allocation checks and, with the worker adapter, each worker's hard cap
	// (RLIMIT_DATA above its start-up size). Default: the preset's (secure
	// 128 MiB).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`

	// Pool sizes the worker pool (worker adapter only).
	Pool *SandboxPool `json:"pool,omitempty"`

	// Sanitization strips details from script errors.
	Sanitization *SandboxSanitization `json:"sanitization,omitempty"`
}

// SandboxPool is the spec's RuntimePoolOptions plus the worker pool's own
// limits. Utilisation is (running + queued scripts) / (live + starting
// workers).
type SandboxPool struct {
	// MinSize is the number of workers started with the config and kept
	// alive. Default 1; 0 starts workers only on demand.
	MinSize *int `json:"min_size,omitempty"`
	// MaxSize is the most workers, hence scripts running at once. Default
	// 4.
	MaxSize int `json:"max_size,omitempty"`
	// ScaleUpThreshold is the utilisation (a fraction in (0, 1]) at or above
	// which one more worker starts. Default 0.75.
	ScaleUpThreshold float64 `json:"scale_up_threshold,omitempty"`
	// ScaleDownThreshold is the utilisation at or below which, every
	// ScaleInterval, one idle worker above MinSize stops. Default 0.25.
	ScaleDownThreshold float64 `json:"scale_down_threshold,omitempty"`
	// ScaleInterval is the period of the scale-down check. Default 5s.
	ScaleInterval caddy.Duration `json:"scale_interval,omitempty"`
	// QueueSize is how many scripts may wait for a worker (QUEUE_FULL
	// beyond). Default 1000; -1 means none.
	QueueSize int `json:"queue_size,omitempty"`
	// QueueTimeout is how long a script waits for a worker (QUEUE_TIMEOUT).
	// Default 10s.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`
	// MaxMessageBytes bounds each message between Caddy and a worker
	// (MESSAGE_TOO_LARGE). Default 8 MiB.
	MaxMessageBytes int `json:"max_message_bytes,omitempty"`
	// MaxPendingCalls bounds one script's tool calls in flight
	// (TOO_MANY_PENDING_CALLS). Default 128.
	MaxPendingCalls int `json:"max_pending_calls,omitempty"`
	// FloodMessages per FloodInterval is the most a worker may send
	// (MESSAGE_FLOOD). Default 10000 per 100ms.
	FloodMessages int            `json:"flood_messages,omitempty"`
	FloodInterval caddy.Duration `json:"flood_interval,omitempty"`
	// WatchdogGrace is added to a script's timeout before its worker is
	// killed (WORKER_TIMEOUT). Default 1s.
	WatchdogGrace caddy.Duration `json:"watchdog_grace,omitempty"`
	// StartupTimeout bounds a worker's start-up (WORKER_STARTUP_FAILED).
	// Default 10s.
	StartupTimeout caddy.Duration `json:"startup_timeout,omitempty"`
	// MaxExecutionsPerWorker recycles a worker after that many scripts.
	// Default 1000; -1 means never.
	MaxExecutionsPerWorker int `json:"max_executions_per_worker,omitempty"`
	// Command starts a worker. Default: this Caddy binary with the
	// codemode-worker subcommand.
	Command []string `json:"command,omitempty"`
}

// SandboxSanitization strips details from script errors.
type SandboxSanitization struct {
	// RemoveStackTraces drops stack traces (sanitization.removeStackTraces).
	RemoveStackTraces bool `json:"remove_stack_traces,omitempty"`
	// RemoveFilePaths replaces file paths in messages
	// (sanitization.removeFilePaths).
	RemoveFilePaths bool `json:"remove_file_paths,omitempty"`
}

// sandboxState is what the area keeps at run time.
type sandboxState struct {
	engine sandbox.Engine
	key    string // the engine's component key
}

// Engine returns the sandbox engine built from `sandbox` (the worker pool by
// default), for the broker and the meta-tools.
func (a *App) Engine() sandbox.Engine { return a.sandbox.engine }

// options turns the config into engine and pool options.
func (c *SandboxConfig) options() (adapter string, eo *sandbox.Options, po *sandbox.PoolOptions, err error) {
	adapter = c.Adapter
	switch adapter {
	case "", "worker_threads":
		adapter = SandboxAdapterWorker
	case SandboxAdapterWorker, SandboxAdapterInProcess:
	default:
		return "", nil, nil, fmt.Errorf("unknown adapter %q (want %s or %s)", c.Adapter, SandboxAdapterWorker, SandboxAdapterInProcess)
	}
	if _, err := sandbox.Preset(c.Preset); err != nil {
		return "", nil, nil, err
	}
	if c.Timeout < 0 || c.MaxSteps < 0 || c.MaxToolCalls < 0 || c.MaxCallDepth < 0 || c.MaxSourceBytes < 0 ||
		c.MaxNestingDepth < 0 || c.MaxResultBytes < 0 || c.MaxConsoleEntries < 0 || c.MaxConsoleBytes < 0 || c.MemoryBytes < 0 {
		return "", nil, nil, fmt.Errorf("limits must not be negative")
	}
	eo = &sandbox.Options{
		Preset: c.Preset,
		Limits: sandbox.Limits{
			Timeout:           time.Duration(c.Timeout),
			MaxSteps:          c.MaxSteps,
			MaxToolCalls:      c.MaxToolCalls,
			MaxCallDepth:      c.MaxCallDepth,
			MaxSourceBytes:    c.MaxSourceBytes,
			MaxNestingDepth:   c.MaxNestingDepth,
			MaxResultBytes:    c.MaxResultBytes,
			MaxConsoleEntries: c.MaxConsoleEntries,
			MaxConsoleBytes:   c.MaxConsoleBytes,
			MemoryBytes:       c.MemoryBytes,
			AllowConsole:      c.AllowConsole,
		},
	}
	if s := c.Sanitization; s != nil {
		eo.Sanitization = sandbox.Sanitization{RemoveStackTraces: s.RemoveStackTraces, RemoveFilePaths: s.RemoveFilePaths}
	}
	if adapter != SandboxAdapterWorker {
		if c.Pool != nil {
			return "", nil, nil, fmt.Errorf("pool applies to the %s adapter only", SandboxAdapterWorker)
		}
		return adapter, eo, nil, nil
	}
	po = &sandbox.PoolOptions{Engine: eo, MemoryBytes: c.MemoryBytes}
	if p := c.Pool; p != nil {
		if p.MinSize != nil {
			po.MinSize = *p.MinSize
			if po.MinSize == 0 {
				po.MinSize = -1 // PoolOptions: negative means none
			}
		}
		po.MaxSize = p.MaxSize
		po.ScaleUpThreshold = p.ScaleUpThreshold
		po.ScaleDownThreshold = p.ScaleDownThreshold
		po.ScaleInterval = time.Duration(p.ScaleInterval)
		po.QueueSize = p.QueueSize
		po.QueueTimeout = time.Duration(p.QueueTimeout)
		po.MaxMessageBytes = p.MaxMessageBytes
		po.MaxPendingCalls = p.MaxPendingCalls
		po.FloodMessages = p.FloodMessages
		po.FloodInterval = time.Duration(p.FloodInterval)
		po.WatchdogGrace = time.Duration(p.WatchdogGrace)
		po.StartupTimeout = time.Duration(p.StartupTimeout)
		po.MaxExecutionsPerWorker = p.MaxExecutionsPerWorker
		po.Command = p.Command
	}
	return adapter, eo, po, nil
}

// provisionSandbox loads the engine. Engines are components: a reload with
// the same sandbox block reuses the running one (warm workers, scripts in
// flight unaffected); a changed block builds a new one, and the old one
// drains (refuses new scripts, lets running ones finish up to their timeout
// plus grace) and stops when nothing uses it any more, a draining broker
// included.
func (a *App) provisionSandbox(ctx caddy.Context) error {
	cfg := a.Sandbox
	if cfg == nil {
		cfg = &SandboxConfig{}
	}
	adapter, eo, po, err := cfg.options()
	if err != nil {
		return fmt.Errorf("codemode: sandbox: %w", err)
	}
	key, err := componentKey("engine", cfg)
	if err != nil {
		return fmt.Errorf("codemode: sandbox: %w", err)
	}
	logger := a.logger.Named("sandbox")
	engine, err := acquire(key, func() (sandbox.Engine, func() error, error) {
		eo.Logger = logger
		if adapter == SandboxAdapterInProcess {
			e := sandbox.NewInProcess(eo)
			return e, e.Close, nil
		}
		po.Logger = logger
		e, err := sandbox.NewWorkerPool(po)
		if err != nil {
			return nil, nil, err
		}
		timeout := eo.Limits.Timeout
		if timeout == 0 {
			l, _ := sandbox.Preset(eo.Preset)
			timeout = l.Timeout
		}
		return e, func() error { return drainEngine(e, timeout+2*time.Second) }, nil
	})
	if err != nil {
		return fmt.Errorf("codemode: sandbox: %w", err)
	}
	a.hold(key)
	a.sandbox = sandboxState{engine: engine, key: key}
	return nil
}

// drainEngine lets running scripts finish, up to drain, then closes e.
func drainEngine(e sandbox.Engine, drain time.Duration) error {
	if sh, ok := e.(interface{ Shutdown(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		return sh.Shutdown(ctx)
	}
	return e.Close()
}

// parseSandbox parses the `sandbox` subdirective of the codemode global
// option. Syntax:
//
//	sandbox {
//		adapter <worker|inprocess>        # default worker
//		preset <locked_down|secure|balanced|experimental>   # default secure
//		timeout <duration>                # vm.timeoutMs; default: preset
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
//		pool {                            # worker adapter only
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
//			max_executions <n>            # per worker, default 1000; -1 never
//			command <program> [<args>...] # default: this binary codemode-worker
//		}
//		sanitization {
//			remove_stack_traces
//			remove_file_paths
//		}
//	}
//
// Sizes take units (64MiB, 512KB, or plain bytes). With the worker adapter
// the pool survives a config reload when the sandbox block is unchanged.
func parseSandbox(d *caddyfile.Dispenser) (*SandboxConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	c := new(SandboxConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		var err error
		switch sub {
		case "adapter":
			err = oneArg(d, &c.Adapter)
			if err == nil && c.Adapter != SandboxAdapterWorker && c.Adapter != SandboxAdapterInProcess && c.Adapter != "worker_threads" {
				err = d.Errf("sandbox: adapter: %q is not worker or inprocess", c.Adapter)
			}
		case "preset":
			if err = oneArg(d, &c.Preset); err == nil {
				if _, perr := sandbox.Preset(c.Preset); perr != nil {
					err = d.Errf("sandbox: %v", perr)
				}
			}
		case "timeout":
			c.Timeout, err = sandboxDurationArg(d, sub)
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
			c.Pool, err = parseSandboxPool(d)
		case "sanitization":
			c.Sanitization, err = parseSandboxSanitization(d)
		default:
			return nil, d.Errf("sandbox: unrecognized subdirective %q", sub)
		}
		if err != nil {
			return nil, err
		}
	}
	if _, _, _, err := c.options(); err != nil {
		return nil, d.Errf("sandbox: %v", err)
	}
	return c, nil
}

func parseSandboxPool(d *caddyfile.Dispenser) (*SandboxPool, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	p := new(SandboxPool)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
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
			p.QueueSize, err = sandboxIntArg(d, sub, -1)
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
			p.MaxExecutionsPerWorker, err = sandboxIntArg(d, sub, -1)
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
	return p, nil
}

func parseSandboxSanitization(d *caddyfile.Dispenser) (*SandboxSanitization, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	s := new(SandboxSanitization)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "remove_stack_traces":
			s.RemoveStackTraces = true
		case "remove_file_paths":
			s.RemoveFilePaths = true
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

func sandboxFractionArg(d *caddyfile.Dispenser, name string) (float64, error) {
	var s string
	if err := oneArg(d, &s); err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, d.Errf("sandbox: %s: %q is not a fraction between 0 and 1", name, s)
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
