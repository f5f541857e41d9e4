// Package guard enforces rate limits, concurrency limits, execution timeouts
// and IP allow/deny rules for named entities (tools, agents, routes).
//
// A GuardManager built by NewGuardManager from a GuardConfig applies the
// configured defaults; the building blocks (SlidingWindowRateLimiter,
// DistributedSemaphore, IpFilter, WithTimeout) are usable on their own. State
// lives in a Storage: in process memory (the default) or in Redis, where every
// read-modify-write is one server-side Lua script so that limits stay exact
// when many gateways share one Redis.
//
// The package is a plain Go library: it never imports Caddy.
package guard
