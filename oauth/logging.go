package oauth

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// alwaysRedacted are field names whose values never reach a log line,
// whatever logging.redact says. signin is the secret of the browser that
// signed in (it travels in the login answer's redirect URL): whoever holds
// it with the authorization's id may approve the consent and collect the
// code.
var alwaysRedacted = []string{
	"access_token", "refresh_token", "id_token", "code", "code_verifier",
	"client_secret", "password", "token", "authorization", "csrf", "signin",
}

// redactLogger wraps l so that fields named in redact (and alwaysRedacted)
// are logged as "[REDACTED]".
func redactLogger(l *zap.Logger, redact []string) *zap.Logger {
	names := make(map[string]bool, len(redact)+len(alwaysRedacted))
	for _, n := range alwaysRedacted {
		names[n] = true
	}
	for _, n := range redact {
		names[n] = true
	}
	return l.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return redactCore{Core: c, names: names}
	}))
}

type redactCore struct {
	zapcore.Core
	names map[string]bool
}

func (c redactCore) scrub(fields []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field
	for i, f := range fields {
		if c.names[f.Key] {
			if out == nil {
				out = append([]zapcore.Field(nil), fields...)
			}
			out[i] = zap.String(f.Key, "[REDACTED]")
		}
	}
	if out == nil {
		return fields
	}
	return out
}

func (c redactCore) With(fields []zapcore.Field) zapcore.Core {
	return redactCore{Core: c.Core.With(c.scrub(fields)), names: c.names}
}

func (c redactCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c redactCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	return c.Core.Write(e, c.scrub(fields))
}

func errField(err error) zap.Field       { return zap.String("error", err.Error()) }
func logClientID(id string) zap.Field    { return zap.String("client_id", id) }
func logInt(key string, n int) zap.Field { return zap.Int(key, n) }
