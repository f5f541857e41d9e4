package redistest

import (
	"context"
	"testing"
)

func TestStartRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	c, _ := Client(t) // no EnvAddr: starts its own server
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvAddr, s.Addr)
	c2, prefix := Client(t)
	if err := c2.Set(ctx, prefix+"k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if n, err := c2.Exists(ctx, prefix+"k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart: exists=%d err=%v, want an empty server", n, err)
	}
}
