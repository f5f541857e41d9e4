package engine

import (
	"context"
	"fmt"
	"sort"
	"time"
)

// Preset names (vm.preset).
const (
	PresetLockedDown   = "locked_down"
	PresetSecure       = "secure"
	PresetBalanced     = "balanced"
	PresetExperimental = "experimental"

	// DefaultPreset is used when no preset is named.
	DefaultPreset = PresetSecure
)

// presets holds every limit of every preset. Each field is set so that a
// preset alone is a complete configuration; the README tabulates them.
var presets = map[string]Limits{
	PresetLockedDown: {
		Timeout:           2 * time.Second,
		CPUTime:           2 * time.Second,
		MaxSteps:          10_000,
		MaxToolCalls:      20,
		MaxCallDepth:      64,
		MaxSourceBytes:    16 << 10,
		MaxNestingDepth:   32,
		MaxResultBytes:    256 << 10,
		MaxConsoleEntries: 50,
		MaxConsoleBytes:   16 << 10,
		MemoryBytes:       64 << 20,
	},
	PresetSecure: {
		Timeout:           3500 * time.Millisecond,
		CPUTime:           3500 * time.Millisecond,
		MaxSteps:          100_000,
		MaxToolCalls:      100,
		MaxCallDepth:      128,
		MaxSourceBytes:    64 << 10,
		MaxNestingDepth:   64,
		MaxResultBytes:    1 << 20,
		MaxConsoleEntries: 200,
		MaxConsoleBytes:   64 << 10,
		MemoryBytes:       128 << 20,
	},
	PresetBalanced: {
		Timeout:           5 * time.Second,
		CPUTime:           5 * time.Second,
		MaxSteps:          1_000_000,
		MaxToolCalls:      200,
		MaxCallDepth:      256,
		MaxSourceBytes:    128 << 10,
		MaxNestingDepth:   100,
		MaxResultBytes:    4 << 20,
		MaxConsoleEntries: 1000,
		MaxConsoleBytes:   256 << 10,
		MemoryBytes:       256 << 20,
	},
	PresetExperimental: {
		Timeout:           30 * time.Second,
		CPUTime:           30 * time.Second,
		MaxSteps:          10_000_000,
		MaxToolCalls:      1000,
		MaxCallDepth:      512,
		MaxSourceBytes:    512 << 10,
		MaxNestingDepth:   200,
		MaxResultBytes:    16 << 20,
		MaxConsoleEntries: 10_000,
		MaxConsoleBytes:   1 << 20,
		MemoryBytes:       512 << 20,
	},
}

// Preset returns the limits of a named preset. The empty name is the default
// preset (secure). AllowConsole is false in every preset: console capture is
// a separate setting (vm.allowConsole).
func Preset(name string) (Limits, error) {
	if name == "" {
		name = DefaultPreset
	}
	l, ok := presets[name]
	if !ok {
		return Limits{}, fmt.Errorf("unknown sandbox preset %q (want one of %v)", name, PresetNames())
	}
	return l, nil
}

// PresetNames lists the preset names in a stable order.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// MergeLimits returns base with every non-zero field of override applied
// ("zero field = keep"), raising or lowering. AllowConsole can only be
// switched on by an override. It is the operator's tool: Options.Limits over
// a preset. A request's limits go through LowerLimits instead.
func MergeLimits(base, override Limits) Limits {
	keepPositive(&base.Timeout, override.Timeout)
	keepPositive(&base.CPUTime, override.CPUTime)
	keepPositive(&base.MaxSteps, override.MaxSteps)
	keepPositive(&base.MaxToolCalls, override.MaxToolCalls)
	keepPositive(&base.MaxCallDepth, override.MaxCallDepth)
	keepPositive(&base.MaxSourceBytes, override.MaxSourceBytes)
	keepPositive(&base.MaxNestingDepth, override.MaxNestingDepth)
	keepPositive(&base.MaxResultBytes, override.MaxResultBytes)
	keepPositive(&base.MaxConsoleEntries, override.MaxConsoleEntries)
	keepPositive(&base.MaxConsoleBytes, override.MaxConsoleBytes)
	keepPositive(&base.MemoryBytes, override.MemoryBytes)
	if override.AllowConsole {
		base.AllowConsole = true
	}
	return base
}

// LowerLimits applies a request's limits to an engine's: every non-zero
// field of req that is below the engine's value lowers it; nothing is
// raised. Timeout is the exception (see Limits): a request's Timeout is
// taken as given, while the running time stays within CPUTime. Both engines
// apply Request.Limits with it.
func LowerLimits(engine, req Limits) Limits {
	out := engine
	keepPositive(&out.Timeout, req.Timeout)
	lower(&out.CPUTime, req.CPUTime)
	lower(&out.MaxSteps, req.MaxSteps)
	lower(&out.MaxToolCalls, req.MaxToolCalls)
	lower(&out.MaxCallDepth, req.MaxCallDepth)
	lower(&out.MaxSourceBytes, req.MaxSourceBytes)
	lower(&out.MaxNestingDepth, req.MaxNestingDepth)
	lower(&out.MaxResultBytes, req.MaxResultBytes)
	lower(&out.MaxConsoleEntries, req.MaxConsoleEntries)
	lower(&out.MaxConsoleBytes, req.MaxConsoleBytes)
	lower(&out.MemoryBytes, req.MemoryBytes)
	if req.AllowConsole {
		out.AllowConsole = true
	}
	if out.CPUTime <= 0 || out.CPUTime > out.Timeout {
		out.CPUTime = out.Timeout
	}
	return out
}

// CheckLimits reports the first field of req that exceeds the ceiling as a
// *LimitError (code LIMIT_EXCEEDED), for layers that refuse such requests
// instead of lowering them.
func CheckLimits(ceiling, req Limits) error {
	check := func(field string, v, max int64, unit string) error {
		if v > 0 && max > 0 && v > max {
			return &LimitError{Field: field, Value: v, Max: max, Unit: unit}
		}
		return nil
	}
	for _, c := range []struct {
		field  string
		v, max int64
		unit   string
	}{
		{"timeout", req.Timeout.Milliseconds(), ceiling.Timeout.Milliseconds(), "ms"},
		{"cpuTime", req.CPUTime.Milliseconds(), ceiling.CPUTime.Milliseconds(), "ms"},
		{"maxSteps", req.MaxSteps, ceiling.MaxSteps, ""},
		{"maxToolCalls", int64(req.MaxToolCalls), int64(ceiling.MaxToolCalls), ""},
		{"maxCallDepth", int64(req.MaxCallDepth), int64(ceiling.MaxCallDepth), ""},
		{"maxResultBytes", int64(req.MaxResultBytes), int64(ceiling.MaxResultBytes), "bytes"},
		{"memoryBytes", req.MemoryBytes, ceiling.MemoryBytes, "bytes"},
	} {
		if err := check(c.field, c.v, c.max, c.unit); err != nil {
			return err
		}
	}
	return nil
}

// CodeLimitExceeded is the code of a request that asks for more than the
// operator's ceiling.
const CodeLimitExceeded = "LIMIT_EXCEEDED"

// LimitError is a request limit above its ceiling.
type LimitError struct {
	Field      string
	Value, Max int64
	Unit       string
}

func (e *LimitError) Error() string {
	unit := ""
	if e.Unit != "" {
		unit = " " + e.Unit
	}
	return fmt.Sprintf("%s of %d%s exceeds the configured maximum of %d%s", e.Field, e.Value, unit, e.Max, unit)
}

// lower sets *dst to v when v is positive and below *dst (or *dst is 0,
// unlimited).
func lower[T int | int64 | time.Duration](dst *T, v T) {
	if v > 0 && (*dst <= 0 || v < *dst) {
		*dst = v
	}
}

// keepPositive sets *dst to v when v is positive (a zero override keeps the
// base value).
func keepPositive[T int | int64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// Options configure an engine. A nil *Options means all defaults.
type Options struct {
	// Preset names the base limits (locked_down, secure, balanced,
	// experimental). Default secure. An unknown name falls back to secure
	// with a warning; validate names with Preset first.
	Preset string
	// Limits override the preset field by field; zero fields keep the
	// preset's value.
	Limits Limits
	// Sanitization of error details. Default: keep stacks and paths.
	Sanitization Sanitization
	// Logger receives engine diagnostics (never script data): a
	// *zap.Logger through sandbox.ZapLogger. Default none.
	Logger Logger
	// Metrics, when set, counts the in-process engine's scripts (workers
	// never get it; a pool counts with PoolOptions.Metrics). Nil records
	// nothing (sandbox.NewInProcess makes spans still); sandbox.Metrics
	// implement it.
	Metrics Recorder
}

// resolve returns the effective limits and logger of opts.
func (o *Options) resolve() (Limits, Sanitization, Logger) {
	var opts Options
	if o != nil {
		opts = *o
	}
	logger := opts.Logger
	if logger == nil {
		logger = nopLogger{}
	}
	base, err := Preset(opts.Preset)
	if err != nil {
		logger.Log(context.Background(), "warn", "unknown sandbox preset, using default", "preset", opts.Preset, "default", DefaultPreset)
		base = presets[DefaultPreset]
	}
	l := opts.Limits
	if l.Timeout > 0 && l.CPUTime == 0 {
		// vm.timeoutMs alone sets the script's time limit: running time
		// included.
		l.CPUTime = l.Timeout
	}
	merged := MergeLimits(base, l)
	if merged.CPUTime > merged.Timeout {
		merged.CPUTime = merged.Timeout
	}
	return merged, opts.Sanitization, logger
}
