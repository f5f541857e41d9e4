// Package broker runs scripts in sessions and streams their events to the
// caller as NDJSON.
//
// A Broker owns sessions (in memory, or in Redis so that several gateways
// share them), a ToolRegistry of Go tools, an optional OpenAPI action catalog,
// and the HTTP interface of the code execution broker: POST /execute,
// GET /sessions/{id}, POST /sessions/{id}/tool-result, GET /health and
// GET /code/actions. Scripts run in a sandbox.Engine; every tool call they
// make is validated against the tool's declared parameters, passes the guard
// (rate limit, concurrency, timeout) and is answered by a Go handler, the
// catalog, or the caller through the tool-result endpoint.
//
// The package never imports Caddy: caddymodules wraps it.
package broker
