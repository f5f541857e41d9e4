package guard

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var errExecutionTimeout = errors.New("execution timeout")

// WithTimeout runs fn with a context that ends after timeoutMs and returns
// its result, or an EXECUTION_TIMEOUT *GuardError for entityName when the
// deadline passes first. fn keeps running in the background until it
// returns, so it should honour its context. timeoutMs 0 or less means no
// timeout. A panic in fn is returned as an error.
func WithTimeout[T any](ctx context.Context, timeoutMs int64, entityName string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if timeoutMs <= 0 {
		return fn(ctx)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, time.Duration(timeoutMs)*time.Millisecond, errExecutionTimeout)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{err: fmt.Errorf("guarded execution of %q panicked: %v", entityName, p)}
			}
			done <- r
		}()
		r.v, r.err = fn(ctx)
	}()
	select {
	case r := <-done:
		if r.err != nil && context.Cause(ctx) == errExecutionTimeout && errors.Is(r.err, context.DeadlineExceeded) {
			return zero, NewExecutionTimeoutError(entityName, timeoutMs)
		}
		return r.v, r.err
	case <-ctx.Done():
		if context.Cause(ctx) == errExecutionTimeout {
			return zero, NewExecutionTimeoutError(entityName, timeoutMs)
		}
		return zero, ctx.Err()
	}
}
