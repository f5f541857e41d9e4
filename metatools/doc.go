// Package metatools serves the four meta-tools of the code-mode gateway
// (meta:search, meta:describe, meta:execute, meta:invoke) over one tool index
// fed by any number of ToolSources: the broker's registry, the OpenAPI
// catalog, upstream MCP servers. Server exposes the meta-tools as an MCP
// server (github.com/modelcontextprotocol/go-sdk) for Streamable HTTP or
// stdio; Service is the same logic as plain Go methods.
//
// The package never imports Caddy; caddymodules wires it to the codemode app.
package metatools
