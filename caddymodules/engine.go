package caddymodules

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/codemode-gateway/caddy-codemode/broker/sandbox"
)

func init() {
	caddy.RegisterModule(WorkerEngine{})
	caddy.RegisterModule(InProcessEngine{})
}

// Engine is a `codemode.engines.*` module: the engine that runs the
// scripts of meta:execute and of the broker's /execute. The app's `sandbox`
// field holds one; its engine name is the "engine" key (worker by default).
type Engine interface {
	// Engine returns the provisioned engine and its key in the component
	// pool (a broker built on it includes the key in its own and retains
	// it).
	Engine() (sandbox.Engine, string)
}

// Engine module names.
const (
	// EngineWorker runs scripts in memory-capped worker processes (the
	// default). The spec's "worker_threads" names the same.
	EngineWorker = "worker"
	// EngineInProcess runs scripts in the Caddy process: faster to start,
	// but it cannot cap memory; for trusted code and tests.
	EngineInProcess = "inprocess"
)

// SandboxLimits are the limits of every script, shared by the engines.
// Limits left unset come from the preset.
type SandboxLimits struct {
	// Preset is the base of every limit (vm.preset): locked_down (2 s),
	// secure (3.5 s, 128 MiB), balanced (5 s) or experimental (30 s).
	// Default secure.
	Preset string `json:"preset,omitempty"`
	// Timeout overrides the preset's wall-clock limit of one script
	// (vm.timeoutMs), waits for tools included; alone it also sets
	// CPUTime. Default: the preset's.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// CPUTime bounds the time one script spends running JavaScript (and
	// compiling), waits for tools excluded. Default: the timeout.
	CPUTime caddy.Duration `json:"cpu_time,omitempty"`
	// MaxSteps overrides the preset's loop-step limit (vm.maxSteps), in
	// steps. Default: the preset's.
	MaxSteps int64 `json:"max_steps,omitempty"`
	// MaxToolCalls overrides the preset's tool calls per script. Default:
	// the preset's.
	MaxToolCalls int `json:"max_tool_calls,omitempty"`
	// MaxCallDepth overrides the preset's JavaScript call stack depth, in
	// frames. Default: the preset's.
	MaxCallDepth int `json:"max_call_depth,omitempty"`
	// MaxSourceBytes overrides the preset's script size limit, in bytes.
	// Default: the preset's.
	MaxSourceBytes int `json:"max_source_bytes,omitempty"`
	// MaxNestingDepth overrides the preset's syntax nesting limit, in
	// levels. Default: the preset's.
	MaxNestingDepth int `json:"max_nesting_depth,omitempty"`
	// MaxResultBytes overrides the preset's result size limit, in bytes.
	// Default: the preset's.
	MaxResultBytes int `json:"max_result_bytes,omitempty"`
	// MaxConsoleEntries overrides the preset's console entry budget, in
	// entries. Default: the preset's.
	MaxConsoleEntries int `json:"max_console_entries,omitempty"`
	// MaxConsoleBytes overrides the preset's console byte budget, in
	// bytes. Default: the preset's.
	MaxConsoleBytes int `json:"max_console_bytes,omitempty"`
	// AllowConsole captures console.* into the result's logs
	// (vm.allowConsole). Default false.
	AllowConsole bool `json:"allow_console,omitempty"`
	// MemoryBytes is the memory of one script, in bytes: the engine's
	// allocation checks and, with the worker engine, each worker's hard cap
	// (RLIMIT_DATA above its start-up size). Default: the preset's (secure:
	// 128 MiB).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Sanitization strips details from script errors. Default: keep them.
	Sanitization *SandboxSanitization `json:"sanitization,omitempty"`
}

// SandboxSanitization strips details from script errors.
type SandboxSanitization struct {
	// RemoveStackTraces drops stack traces (sanitization.removeStackTraces).
	// Default false.
	RemoveStackTraces bool `json:"remove_stack_traces,omitempty"`
	// RemoveFilePaths replaces file paths in messages
	// (sanitization.removeFilePaths). Default false.
	RemoveFilePaths bool `json:"remove_file_paths,omitempty"`
	// RemoveHosts replaces URLs, IP addresses and host:port pairs in
	// messages with [url] and [host]. Default false.
	RemoveHosts bool `json:"remove_hosts,omitempty"`
	// RemoveEnvValues replaces the values of KEY=value pairs (upper-case
	// names) with [redacted]. Default false.
	RemoveEnvValues bool `json:"remove_env_values,omitempty"`
	// RemoveTypeNames replaces Go type names (*json.SyntaxError) with
	// [type]. Default false.
	RemoveTypeNames bool `json:"remove_type_names,omitempty"`
}

// sanitization is the engine's sanitization policy (none when unset).
func (l *SandboxLimits) sanitization() sandbox.Sanitization {
	if l.Sanitization == nil {
		return sandbox.Sanitization{}
	}
	return l.Sanitization.policy()
}

// policy is the sandbox's Sanitization of s.
func (s *SandboxSanitization) policy() sandbox.Sanitization {
	return sandbox.Sanitization{RemoveStackTraces: s.RemoveStackTraces, RemoveFilePaths: s.RemoveFilePaths,
		RemoveHosts: s.RemoveHosts, RemoveEnvValues: s.RemoveEnvValues, RemoveTypeNames: s.RemoveTypeNames}
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
	// (MESSAGE_TOO_LARGE), in bytes. Default 8 MiB.
	MaxMessageBytes int `json:"max_message_bytes,omitempty"`
	// MaxPendingCalls bounds one script's tool calls in flight
	// (TOO_MANY_PENDING_CALLS). Default 128.
	MaxPendingCalls int `json:"max_pending_calls,omitempty"`
	// FloodMessages is the most messages a worker may send per
	// FloodInterval (MESSAGE_FLOOD). Default 10000.
	FloodMessages int `json:"flood_messages,omitempty"`
	// FloodInterval is the period of FloodMessages. Default 100ms.
	FloodInterval caddy.Duration `json:"flood_interval,omitempty"`
	// WatchdogGrace is added to a script's timeout before its worker is
	// killed (WORKER_TIMEOUT). Default 1s.
	WatchdogGrace caddy.Duration `json:"watchdog_grace,omitempty"`
	// StartupTimeout bounds a worker's start-up (WORKER_STARTUP_FAILED).
	// Default 10s.
	StartupTimeout caddy.Duration `json:"startup_timeout,omitempty"`
	// MaxExecutionsPerWorker recycles a worker after that many scripts.
	// Default 10000; -1 means never.
	MaxExecutionsPerWorker int `json:"max_executions_per_worker,omitempty"`
	// SpareWorkers is how many started workers are kept ready (running no
	// script) beyond those in use, so that a recycle or a worker killed for
	// memory hands the next script to a process already up. Default 1; 0
	// means none.
	SpareWorkers *int `json:"spare_workers,omitempty"`
	// Command starts a worker. Default: this Caddy binary with the
	// codemode-worker subcommand.
	Command []string `json:"command,omitempty"`
	// SessionsPerWorker is how many scripts one worker hosts at once,
	// running or waiting for tool results (a worker's death ends them
	// all: the blast radius). Default 64.
	SessionsPerWorker int `json:"sessions_per_worker,omitempty"`
	// MaxWorkers is the most worker processes; beyond MaxSize they only
	// host waiting scripts. Principals share a worker only when this many
	// are alive. Default the larger of MaxSize and 16.
	MaxWorkers int `json:"max_workers,omitempty"`
	// SessionMemoryBytes is added to each worker's memory cap per hosted
	// script, in bytes. Default 1 MiB.
	SessionMemoryBytes int64 `json:"session_memory_bytes,omitempty"`
	// MaxRunningPerPrincipal bounds the scripts one principal (user, API
	// key, client address) runs at once. Default MaxSize - 1.
	MaxRunningPerPrincipal int `json:"max_running_per_principal,omitempty"`
	// MaxSessionsPerPrincipal bounds one principal's scripts in the pool,
	// running or waiting; more wait to start. Default a quarter of the
	// seats (MaxWorkers x SessionsPerWorker).
	MaxSessionsPerPrincipal int `json:"max_sessions_per_principal,omitempty"`
	// MaxQueuedPerPrincipal bounds one principal's scripts waiting to
	// start (QUEUE_FULL beyond). Default a tenth of QueueSize.
	MaxQueuedPerPrincipal int `json:"max_queued_per_principal,omitempty"`
}

// options validates the limits and turns them into engine options.
func (l *SandboxLimits) options() (*sandbox.Options, error) {
	if _, err := sandbox.Preset(l.Preset); err != nil {
		return nil, err
	}
	for _, f := range []namedCount{{"timeout", int64(l.Timeout), 0}, {"cpu_time", int64(l.CPUTime), 0}, {"max_steps", l.MaxSteps, 0},
		{"max_tool_calls", int64(l.MaxToolCalls), 0}, {"max_call_depth", int64(l.MaxCallDepth), 0},
		{"max_source_bytes", int64(l.MaxSourceBytes), 0}, {"max_nesting_depth", int64(l.MaxNestingDepth), 0},
		{"max_result_bytes", int64(l.MaxResultBytes), 0}, {"max_console_entries", int64(l.MaxConsoleEntries), 0},
		{"max_console_bytes", int64(l.MaxConsoleBytes), 0}, {"memory_bytes", l.MemoryBytes, 0}} {
		if f.n < f.least {
			return nil, fmt.Errorf("limits must not be negative: %s is %d", f.name, f.n)
		}
	}
	eo := &sandbox.Options{
		Preset: l.Preset,
		Limits: sandbox.Limits{
			Timeout:           time.Duration(l.Timeout),
			CPUTime:           time.Duration(l.CPUTime),
			MaxSteps:          l.MaxSteps,
			MaxToolCalls:      l.MaxToolCalls,
			MaxCallDepth:      l.MaxCallDepth,
			MaxSourceBytes:    l.MaxSourceBytes,
			MaxNestingDepth:   l.MaxNestingDepth,
			MaxResultBytes:    l.MaxResultBytes,
			MaxConsoleEntries: l.MaxConsoleEntries,
			MaxConsoleBytes:   l.MaxConsoleBytes,
			MemoryBytes:       l.MemoryBytes,
			AllowConsole:      l.AllowConsole,
		},
	}
	if s := l.Sanitization; s != nil {
		eo.Sanitization = s.policy()
	}
	return eo, nil
}

// withDefaults names the preset, so that a block stating the default preset
// and one leaving it out are the same component.
func (l SandboxLimits) withDefaults() SandboxLimits {
	if l.Preset == "" {
		l.Preset = sandbox.PresetSecure
	}
	return l
}

// namedCount is a number of the configuration (a count, a size or a
// duration in nanoseconds), its name, and the least value it may have.
type namedCount struct {
	name  string
	n     int64
	least int64
}

// validate refuses what the pool's options would take for another
// value: below zero the pool reads a count as "none" or "the default" and
// a duration as "the default", so min_size -2 started no worker and
// queue_timeout -1s waited 10s. Only queue_size and
// max_executions_per_worker have a meaning below zero (-1). nil is valid.
func (p *SandboxPool) validate() error {
	if p == nil {
		return nil
	}
	if err := noNegativeDuration(namedDuration{"scale_interval", p.ScaleInterval}, namedDuration{"queue_timeout", p.QueueTimeout},
		namedDuration{poolKey("flood_interval"), p.FloodInterval}, namedDuration{"watchdog_grace", p.WatchdogGrace},
		namedDuration{"startup_timeout", p.StartupTimeout}); err != nil {
		return fmt.Errorf("pool: %w", err)
	}
	counts := []namedCount{{"max_size", int64(p.MaxSize), 0}, {"queue_size", int64(p.QueueSize), -1}, {"max_message_bytes", int64(p.MaxMessageBytes), 0},
		{"max_pending_calls", int64(p.MaxPendingCalls), 0}, {"flood_messages", int64(p.FloodMessages), 0},
		{"max_executions_per_worker", int64(p.MaxExecutionsPerWorker), -1}, {"sessions_per_worker", int64(p.SessionsPerWorker), 0},
		{"max_workers", int64(p.MaxWorkers), 0}, {"session_memory_bytes", p.SessionMemoryBytes, 0},
		{"max_running_per_principal", int64(p.MaxRunningPerPrincipal), 0},
		{"max_sessions_per_principal", int64(p.MaxSessionsPerPrincipal), 0},
		{"max_queued_per_principal", int64(p.MaxQueuedPerPrincipal), 0}}
	if p.MinSize != nil {
		counts = append(counts, namedCount{"min_size", int64(*p.MinSize), 0})
	}
	if p.SpareWorkers != nil {
		counts = append(counts, namedCount{"spare_workers", int64(*p.SpareWorkers), 0})
	}
	for _, f := range counts {
		if f.n < f.least {
			return fmt.Errorf("pool: %s %d is below %d", poolKey(f.name), f.n, f.least)
		}
	}
	return nil
}

// poolCaddyfileKeys are the pool options whose Caddyfile key is not their
// JSON key.
var poolCaddyfileKeys = map[string]string{
	"min_size": "min", "max_size": "max", "scale_up_threshold": "scale_up", "scale_down_threshold": "scale_down",
	"max_message_bytes": "max_message", "flood_messages": "flood", "flood_interval": "flood",
	"max_executions_per_worker": "max_executions", "spare_workers": "spare", "session_memory_bytes": "session_memory",
}

// poolKey names the pool option of JSON key jsonKey as the Caddyfile
// writes it, followed by the JSON key where that differs ("max (max_size)"),
// so that an operator reading an error finds the option in either.
func poolKey(jsonKey string) string {
	if k, ok := poolCaddyfileKeys[jsonKey]; ok {
		return k + " (" + jsonKey + ")"
	}
	return jsonKey
}

// poolFieldKey is poolKey of the SandboxPool field named field, which is
// also the name of the sandbox.PoolOptions field it sets.
func poolFieldKey(field string) string {
	f, ok := reflect.TypeFor[SandboxPool]().FieldByName(field)
	if !ok {
		return field
	}
	return poolKey(strings.Split(f.Tag.Get("json"), ",")[0])
}

// poolOptions turns the pool settings into the pool's options.
func (p *SandboxPool) poolOptions(eo *sandbox.Options, memory int64) *sandbox.PoolOptions {
	po := &sandbox.PoolOptions{Engine: eo, MemoryBytes: memory}
	if p == nil {
		return po
	}
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
	if p.SpareWorkers != nil {
		po.SpareWorkers = *p.SpareWorkers
		if po.SpareWorkers == 0 {
			po.SpareWorkers = -1 // PoolOptions: negative means none
		}
	}
	po.Command = p.Command
	po.SessionsPerWorker = p.SessionsPerWorker
	po.MaxWorkers = p.MaxWorkers
	po.SessionMemoryBytes = p.SessionMemoryBytes
	po.MaxRunningPerPrincipal = p.MaxRunningPerPrincipal
	po.MaxSessionsPerPrincipal = p.MaxSessionsPerPrincipal
	po.MaxQueuedPerPrincipal = p.MaxQueuedPerPrincipal
	return po
}

// engineHandle is the provisioned engine of a module.
type engineHandle struct {
	engine sandbox.Engine
	key    string
}

// Engine implements Engine.
func (h *engineHandle) Engine() (sandbox.Engine, string) { return h.engine, h.key }

// Cleanup releases the engine; the last release drains and stops it.
func (h *engineHandle) Cleanup() error {
	key := h.key
	h.engine, h.key = nil, ""
	return release(key)
}

// WorkerEngine runs scripts in a pool of worker processes (this Caddy
// binary re-executed as `caddy codemode-worker`), one script at a time
// each, every worker's memory capped by the kernel. The default engine.
type WorkerEngine struct {
	SandboxLimits
	// Pool sizes the worker pool. Default: the defaults of each field.
	Pool *SandboxPool `json:"pool,omitempty"`

	engineHandle
}

// CaddyModule returns the Caddy module information.
func (WorkerEngine) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.engines.worker",
		New: func() caddy.Module { return new(WorkerEngine) },
	}
}

// Provision acquires the pool: a component keyed by these settings, so a
// reload with the same block keeps its warm workers.
func (w *WorkerEngine) Provision(ctx caddy.Context) error {
	eo, err := w.options()
	if err == nil {
		err = w.Pool.validate()
	}
	if err != nil {
		return fmt.Errorf("codemode.engines.worker: %w", err)
	}
	logger := ctx.Logger()
	eo.Logger = sandbox.ZapLogger(logger)
	po := w.Pool.poolOptions(eo, w.MemoryBytes)
	po.Logger = eo.Logger
	po.Metrics = processTelemetry().sandbox
	key, err := componentKey("engine", struct {
		Engine string
		WorkerEngine
	}{EngineWorker, WorkerEngine{SandboxLimits: w.withDefaults(), Pool: w.Pool}})
	if err != nil {
		return err
	}
	e, err := acquire(key, func() (sandbox.Engine, func() error, error) {
		e, err := sandbox.NewWorkerPool(po)
		if poe := (*sandbox.PoolOptionError)(nil); errors.As(err, &poe) {
			// The pool's own check names its Go fields (maxSize).
			return nil, nil, errors.New("pool: " + poe.Message(poolFieldKey))
		}
		if err != nil {
			return nil, nil, err
		}
		return e, func() error { return retireEngine(e, logger) }, nil
	})
	if err != nil {
		return fmt.Errorf("codemode.engines.worker: %w", err)
	}
	w.engineHandle = engineHandle{engine: e, key: key}
	return nil
}

// InProcessEngine runs scripts in the Caddy process: the fastest start, but
// it cannot cap a script's memory, so it suits trusted code and tests.
type InProcessEngine struct {
	SandboxLimits
	// TrustedCallers states that every caller whose scripts this engine
	// runs is trusted. Required: goja has no heap limit and a built-in can
	// outrun a deadline, so a hostile script can exhaust the Caddy
	// process's memory or CPU, which only the worker engine's processes
	// contain.
	TrustedCallers bool `json:"trusted_callers,omitempty"`

	engineHandle
}

// errUntrustedInProcess says why the in-process engine needs
// trusted_callers.
var errUntrustedInProcess = errors.New("the in-process engine runs scripts in the Caddy process, where a script's memory cannot be capped (goja has no heap limit) and a built-in can outrun its deadline: a hostile caller could take the gateway down. Set trusted_callers when every caller is trusted (tests, your own code), or use the worker engine")

// CaddyModule returns the Caddy module information.
func (InProcessEngine) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "codemode.engines.inprocess",
		New: func() caddy.Module { return new(InProcessEngine) },
	}
}

// Provision acquires the engine.
func (p *InProcessEngine) Provision(ctx caddy.Context) error {
	if !p.TrustedCallers {
		return fmt.Errorf("codemode.engines.inprocess: %w", errUntrustedInProcess)
	}
	eo, err := p.options()
	if err != nil {
		return fmt.Errorf("codemode.engines.inprocess: %w", err)
	}
	eo.Logger = sandbox.ZapLogger(ctx.Logger())
	eo.Metrics = processTelemetry().sandbox
	key, err := componentKey("engine", struct {
		Engine string
		SandboxLimits
	}{EngineInProcess, p.withDefaults()})
	if err != nil {
		return err
	}
	e, err := acquire(key, func() (sandbox.Engine, func() error, error) {
		e := sandbox.NewInProcess(eo)
		return e, e.Close, nil
	})
	if err != nil {
		return fmt.Errorf("codemode.engines.inprocess: %w", err)
	}
	p.engineHandle = engineHandle{engine: e, key: key}
	return nil
}

// retireEngine refuses new scripts at once and lets the running ones
// finish, each up to its own time limit (the pool bounds the wait by the
// latest of them), then closes e; the wait is retire's. The drain was the
// sandbox's timeout + 2 s: a meta:execute plan of an older MCP revision
// waiting for its client's elicitation answer, whose limit is the broker's
// execution timeout (30 s by default), ended POOL_DISPOSED 5.5 s after a
// reload that changed the sandbox block. Then the drain ran in the cleanup
// that let go of the engine's last reference: when that was the config's
// own and not the old broker's (which drains in the background), Caddy's
// Load waited until such a plan ended.
func retireEngine(e sandbox.Engine, logger *zap.Logger) error {
	sh, ok := e.(interface {
		BeginShutdown(context.Context) <-chan error
	})
	if !ok {
		return e.Close()
	}
	closed := sh.BeginShutdown(context.Background())
	retire(func() {
		if err := <-closed; err != nil {
			logger.Warn("closing a retired sandbox worker pool", zap.Error(err))
		}
	})
	return nil
}

// Interface guards
var (
	_ Engine             = (*WorkerEngine)(nil)
	_ Engine             = (*InProcessEngine)(nil)
	_ caddy.Provisioner  = (*WorkerEngine)(nil)
	_ caddy.Provisioner  = (*InProcessEngine)(nil)
	_ caddy.CleanerUpper = (*WorkerEngine)(nil)
	_ caddy.CleanerUpper = (*InProcessEngine)(nil)
)
