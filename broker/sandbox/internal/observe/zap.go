package observe

import (
	"context"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/codemode-gateway/caddy-codemode/internal/telemetry"
)

// Zap logs an engine's diagnostics (an engine.Logger) to l, or to the
// logger of the request in the context when it carries one.
type Zap struct{ L *zap.Logger }

// Log writes msg at level ("debug", "info", "warn" or "error") with
// key-value pairs.
func (z Zap) Log(ctx context.Context, level, msg string, kv ...any) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		lvl = zapcore.ErrorLevel
	}
	ce := telemetry.Logger(ctx, z.L).Check(lvl, msg)
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		key, _ := kv[i].(string)
		fields = append(fields, zap.Any(key, kv[i+1]))
	}
	ce.Write(fields...)
}
