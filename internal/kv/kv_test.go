package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codemode-gateway/caddy-codemode/guard/redistest"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// The same contract holds for both backends, with and without a prefix.
func TestStoreContract(t *testing.T) {
	rc, prefix := redistest.Client(t)
	clk := &clock{t: time.Now()}
	for name, st := range map[string]interface {
		Store
		Ping(context.Context) error
	}{
		"memory":           NewMemory(clk.now, ""),
		"memory prefixed":  NewMemory(clk.now, "p:"),
		"redis":            NewRedis(rc, prefix, nil),
		"redis prefixed 2": NewRedis(rc, prefix+"credentials:", nil),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if _, err := st.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get missing: %v", err)
			}
			if ok, err := st.SetXX(ctx, "a", []byte("x"), time.Minute); ok || err != nil {
				t.Fatalf("setxx on missing key: %v %v", ok, err)
			}
			if ok, err := st.SetNX(ctx, "a", []byte("1"), time.Minute); !ok || err != nil {
				t.Fatalf("setnx: %v %v", ok, err)
			}
			if ok, _ := st.SetNX(ctx, "a", []byte("2"), time.Minute); ok {
				t.Fatal("setnx on an existing key succeeded")
			}
			if ok, err := st.SetXX(ctx, "a", []byte("3"), time.Minute); !ok || err != nil {
				t.Fatalf("setxx: %v %v", ok, err)
			}
			if b, _ := st.GetDel(ctx, "a"); string(b) != "3" {
				t.Fatalf("getdel %q", b)
			}
			if _, err := st.GetDel(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("second getdel: %v", err)
			}

			if err := st.Set(ctx, "a", []byte("1"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if ok, _ := st.CompareAndSwap(ctx, "a", []byte("x"), []byte("3"), time.Minute); ok {
				t.Fatal("swap with the wrong old value")
			}
			if ok, _ := st.CompareAndSwap(ctx, "a", []byte("1"), []byte("3"), time.Minute); !ok {
				t.Fatal("swap with the right old value refused")
			}
			if b, _ := st.Get(ctx, "a"); string(b) != "3" {
				t.Fatalf("after swap: %q", b)
			}
			if ok, _ := st.CompareAndSwap(ctx, "a", []byte("3"), nil, 0); !ok {
				t.Fatal("delete by swap refused")
			}
			if _, err := st.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatal("delete by swap left the key")
			}
			if ok, _ := st.CompareAndSwap(ctx, "a", []byte("3"), []byte("4"), 0); ok {
				t.Fatal("swap resurrected a deleted key")
			}

			for _, k := range []string{"vault:x:1", "vault:x:2", "vault:*:3", "other"} {
				_ = st.Set(ctx, k, []byte("v"), time.Minute)
			}
			var got []string
			if err := st.Scan(ctx, "vault:", func(k string) error { got = append(got, k); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 {
				t.Fatalf("scan vault: got %v", got)
			}
			got = nil
			_ = st.Scan(ctx, "vault:*", func(k string) error { got = append(got, k); return nil })
			if len(got) != 1 || got[0] != "vault:*:3" {
				t.Fatalf("a glob character in the prefix is literal: %v", got)
			}
			if err := st.Expire(ctx, "other", time.Millisecond); err != nil {
				t.Fatal(err)
			}

			_ = st.Set(ctx, "b", []byte("v"), 0)
			_ = st.Set(ctx, "c", []byte("v"), time.Minute)
			if err := st.Expire(ctx, "missing", time.Minute); err != nil {
				t.Fatalf("expire missing: %v", err)
			}
			// A ttl of 0 makes a key permanent on both backends.
			if err := st.Expire(ctx, "c", 0); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, "c"); err != nil {
				t.Fatalf("expire 0 removed the key: %v", err)
			}
			if err := st.Del(ctx, "b", "c", "missing"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, "b"); !errors.Is(err, ErrNotFound) {
				t.Fatal("del did not delete")
			}
			if err := st.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			_ = st.Del(ctx, "vault:x:1", "vault:x:2", "vault:*:3", "other")
		})
	}
}

func TestMemoryExpiresByClock(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	st := NewMemory(clk.now, "p:")
	ctx := context.Background()
	_ = st.Set(ctx, "k", []byte("v"), time.Minute)
	_ = st.Set(ctx, "forever", []byte("v"), 0)
	clk.t = clk.t.Add(59 * time.Second)
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	_ = st.Expire(ctx, "k", 2*time.Minute)
	clk.t = clk.t.Add(time.Minute)
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatalf("expire did not extend: %v", err)
	}
	clk.t = clk.t.Add(time.Minute)
	if _, err := st.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after expiry: %v", err)
	}
	if ok, _ := st.SetNX(ctx, "k", []byte("new"), time.Minute); !ok {
		t.Fatal("an expired key blocks setnx")
	}
	// Expired entries are swept on writes, so memory stays bounded.
	_ = st.Set(ctx, "old", []byte("v"), time.Second)
	for i := range 2048 {
		_ = st.Set(ctx, fmt.Sprint("tmp", i), []byte("v"), time.Second)
	}
	clk.t = clk.t.Add(2 * time.Second)
	for i := range sweepEvery {
		_ = st.Set(ctx, fmt.Sprint("new", i), []byte("v"), time.Hour)
	}
	st.mu.Lock()
	n := len(st.m)
	_, kept := st.m["p:old"]
	st.mu.Unlock()
	if n > sweepEvery+3 {
		t.Fatalf("%d entries after the sweep", n)
	}
	if kept {
		t.Fatal("an expired key survived a sweep")
	}
	if _, err := st.Get(ctx, "forever"); err != nil {
		t.Fatal("a key without ttl expired")
	}
}

// TestRedisSwapKeepsAShortTTL: a compare-and-swap with under a millisecond
// to live keeps a time to live (a millisecond, as go-redis's SET rounds
// it); ttl.Milliseconds() was 0, which the script reads as none, and the
// key stayed for ever.
func TestRedisSwapKeepsAShortTTL(t *testing.T) {
	rc, prefix := redistest.Client(t)
	st := NewRedis(rc, prefix, nil)
	ctx := context.Background()
	if err := st.Set(ctx, "short", []byte("a"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.CompareAndSwap(ctx, "short", []byte("a"), []byte("b"), 500*time.Microsecond); !ok || err != nil {
		t.Fatalf("swap: %v %v", ok, err)
	}
	// -1: no time to live; -2: gone (expired, as it should).
	if ttl, err := rc.PTTL(ctx, prefix+"short").Result(); err != nil || ttl == -1 {
		t.Fatalf("time to live after the swap: %v %v", ttl, err)
	}
}
