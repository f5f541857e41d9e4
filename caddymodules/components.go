package caddymodules

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
)

// Components are the long-lived objects of the codemode modules: storage
// backends, guard managers, script engines, brokers, authorization servers.
// Each is built once from its configuration and the components it depends
// on, kept in one caddy.UsagePool under a key, and never changed after
// that (no Set* on a shared object). The key hashes the component's own
// configuration with the keys of its dependencies, so a config that wants
// anything different gets a different key and hence a new object beside
// the old one.
//
// Consequences that reloads rely on:
//   - A reload with an unchanged block reuses the running object (warm
//     workers, counters, sessions carry over).
//   - A failed load only ever creates objects; Caddy cleans the failed
//     config up, their reference counts drop to zero and the running
//     config never saw them.
//   - A component holds a reference to each dependency until it is
//     destroyed, so a broker draining its sessions after a reload keeps its
//     engine alive even though no config names that engine any more.
var components = caddy.NewUsagePool()

// component is a value in components.
type component struct {
	value   any
	destroy func() error
}

// Destruct implements caddy.Destructor.
func (c *component) Destruct() error {
	if c.destroy == nil {
		return nil
	}
	return c.destroy()
}

// componentKey is "<kind>:<hash of the config's JSON and the dependency
// keys>". Secrets in the config only ever reach the hash.
func componentKey(kind string, cfg any, deps ...string) (string, error) {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("%s: hashing the configuration: %w", kind, err)
	}
	h := sha256.New()
	h.Write(raw)
	for _, d := range deps {
		h.Write([]byte{0})
		h.Write([]byte(d))
	}
	return kind + ":" + hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// acquire returns the component under key, building it when no running
// config holds it, and takes a reference that release gives back. build
// returns the value and the function that destroys it.
func acquire[T any](key string, build func() (T, func() error, error)) (T, error) {
	v, _, err := components.LoadOrNew(key, func() (caddy.Destructor, error) {
		val, destroy, err := build()
		if err != nil {
			return nil, err
		}
		return &component{value: val, destroy: destroy}, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(*component).value.(T), nil
}

// errComponentGone is returned by retain for a key that is not in the pool.
var errComponentGone = errors.New("component is not loaded")

// retain takes one more reference to a component that exists: a component
// under construction holds each of its dependencies this way.
func retain(key string) error {
	_, _, err := components.LoadOrNew(key, func() (caddy.Destructor, error) {
		return nil, fmt.Errorf("%s: %w", key, errComponentGone)
	})
	return err
}

// release gives back a reference taken by acquire or retain; the last one
// destroys the component.
func release(key string) error {
	if key == "" {
		return nil
	}
	_, err := components.Delete(key)
	return err
}

// retire runs the end of a retired component's work under way (a broker's
// sessions, an engine's scripts): in the background, unless the process is
// exiting, when the cleanup waits for it. A reload's cleanup runs inside
// Caddy's Load: waiting there would hold the reload, and the config lock,
// until the last of that work ended.
func retire(wait func()) {
	if caddy.Exiting() {
		wait()
		return
	}
	go wait()
}

// holder records the component keys an owner (a config's app, a handler)
// acquired, to release them in reverse order.
type holder struct{ keys []string }

func (h *holder) hold(key string) { h.keys = append(h.keys, key) }

// releaseAll releases every held key, last acquired first.
func (h *holder) releaseAll() error {
	var errs []error
	for i := len(h.keys) - 1; i >= 0; i-- {
		if err := release(h.keys[i]); err != nil {
			errs = append(errs, err)
		}
	}
	h.keys = nil
	return errors.Join(errs...)
}
