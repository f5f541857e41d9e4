package caddymodules

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/codemode-gateway/caddy-codemode/guard"
)

// RateLimit is a sliding-window rate limit, the one shape of every rate
// limit in the configuration (throttle, codemode_guard, meta-tools, the
// token endpoint).
type RateLimit struct {
	// MaxRequests is the number of requests allowed per window. Required.
	MaxRequests int64 `json:"max_requests"`
	// Window is the window length. Default 1m.
	Window caddy.Duration `json:"window,omitempty"`
	// PartitionBy gives each value its own counter: global (default), ip,
	// session or userId; codemode_guard also takes a string with
	// placeholders such as {http.request.header.X-Agent}.
	PartitionBy string `json:"partition_by,omitempty"`
}

// Concurrency is a concurrency limit (a distributed semaphore).
type Concurrency struct {
	// MaxConcurrent is the number of simultaneous executions. Required.
	MaxConcurrent int64 `json:"max_concurrent"`
	// QueueTimeout is how long a request waits for a slot. Default 0:
	// rejected at once with 429 CONCURRENCY_LIMIT.
	QueueTimeout caddy.Duration `json:"queue_timeout,omitempty"`
	// PartitionBy is as for RateLimit.
	PartitionBy string `json:"partition_by,omitempty"`
}

// DefaultWindow is a rate limit's window when none is given.
const DefaultWindow = time.Minute

// validate checks the limit; placeholders says whether a partition may be a
// placeholder string.
func (rl *RateLimit) validate(placeholders bool) error {
	if rl.MaxRequests <= 0 {
		return fmt.Errorf("max_requests: must be positive, got %d", rl.MaxRequests)
	}
	if rl.Window < 0 || (rl.Window > 0 && time.Duration(rl.Window) < time.Millisecond) {
		return errors.New("window: must be at least 1ms")
	}
	if _, err := checkPartition(rl.PartitionBy, placeholders); rl.PartitionBy != "" && err != nil {
		return fmt.Errorf("partition_by: %w", err)
	}
	return nil
}

// withDefaults fills the window, so that a limit spelled with its defaults
// and one leaving them out are the same component.
func (rl RateLimit) withDefaults() RateLimit {
	if rl.Window == 0 {
		rl.Window = caddy.Duration(DefaultWindow)
	}
	if rl.PartitionBy == "" {
		rl.PartitionBy = guard.PartitionGlobal
	}
	return rl
}

func (cc *Concurrency) validate(placeholders bool) error {
	if cc.MaxConcurrent <= 0 {
		return fmt.Errorf("max_concurrent: must be positive, got %d", cc.MaxConcurrent)
	}
	if cc.QueueTimeout < 0 {
		return errors.New("queue_timeout: must not be negative")
	}
	if _, err := checkPartition(cc.PartitionBy, placeholders); cc.PartitionBy != "" && err != nil {
		return fmt.Errorf("partition_by: %w", err)
	}
	return nil
}

func (cc Concurrency) withDefaults() Concurrency {
	if cc.PartitionBy == "" {
		cc.PartitionBy = guard.PartitionGlobal
	}
	return cc
}

// config is the guard library's form. A placeholder partition is resolved
// per request by the caller.
func (rl *RateLimit) config() *guard.RateLimitConfig {
	w := time.Duration(rl.Window)
	if w == 0 {
		w = DefaultWindow
	}
	c := &guard.RateLimitConfig{MaxRequests: rl.MaxRequests, WindowMs: w.Milliseconds()}
	if !isPlaceholderPartition(rl.PartitionBy) {
		c.PartitionBy = guard.PartitionKey{Strategy: rl.PartitionBy}
	}
	return c
}

func (cc *Concurrency) config() *guard.ConcurrencyConfig {
	c := &guard.ConcurrencyConfig{MaxConcurrent: cc.MaxConcurrent, QueueTimeoutMs: time.Duration(cc.QueueTimeout).Milliseconds()}
	if !isPlaceholderPartition(cc.PartitionBy) {
		c.PartitionBy = guard.PartitionKey{Strategy: cc.PartitionBy}
	}
	return c
}

func isPlaceholderPartition(p string) bool { return strings.Contains(p, "{") }

func checkPartition(p string, placeholders bool) (string, error) {
	switch p {
	case guard.PartitionGlobal, guard.PartitionIP, guard.PartitionSession, guard.PartitionUserID:
		return p, nil
	}
	if placeholders && strings.Contains(p, "{") {
		return p, nil
	}
	if placeholders {
		return "", fmt.Errorf("partition %q is not global, ip, session, userId or a placeholder", p)
	}
	return "", fmt.Errorf("partition %q is not global, ip, session or userId", p)
}

// AddressPrefixes are the prefix lengths that key a client address in
// per-address limits (guard.ClientPrefixes): every address of one prefix
// counts as one client. An IPv6 host holds a whole /64 (often a /56 or a
// /48), so keying it on its full address let it rotate past every limit.
// IP filter rules still match the exact address. Embedded by the
// codemode_guard handler and by the codemode app (for the throttle, the
// meta-tools, the broker's per-caller bounds and the auth endpoints).
type AddressPrefixes struct {
	// IPv4Prefix is the prefix length in bits that keys an IPv4 address,
	// 1 to 32. Default 32 (each address on its own).
	IPv4Prefix int `json:"ipv4_prefix,omitempty"`
	// IPv6Prefix is the prefix length in bits that keys an IPv6 address,
	// 1 to 128. Default 64. An IPv4-mapped IPv6 address is keyed as IPv4.
	IPv6Prefix int `json:"ipv6_prefix,omitempty"`
}

// clientPrefixes is the guard's form of p.
func (p AddressPrefixes) clientPrefixes() guard.ClientPrefixes {
	return guard.ClientPrefixes{IPv4: p.IPv4Prefix, IPv6: p.IPv6Prefix}
}

// validate refuses a length out of range.
func (p AddressPrefixes) validate() error { return p.clientPrefixes().Validate() }

// unmarshalCaddyfileOption reads `ipv4_prefix <bits>` or `ipv6_prefix
// <bits>` at d; ok is false when d is at neither.
func (p *AddressPrefixes) unmarshalCaddyfileOption(d *caddyfile.Dispenser) (ok bool, err error) {
	dst := &p.IPv4Prefix
	switch d.Val() {
	case "ipv4_prefix":
	case "ipv6_prefix":
		dst = &p.IPv6Prefix
	default:
		return false, nil
	}
	if *dst != 0 {
		return true, d.Errf("%s: given twice; write it once", d.Val())
	}
	if err := positiveIntArg(d, dst); err != nil {
		return true, err
	}
	if err := p.validate(); err != nil {
		return true, d.Err(err.Error())
	}
	return true, nil
}
