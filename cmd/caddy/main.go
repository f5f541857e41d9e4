// Command caddy is a Caddy build with the codemode modules, for plain
// `go build` and `go run` during development. Release builds use xcaddy with
// the recipe in xcaddy.json; both produce the same modules.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/codemode-gateway/caddy-codemode/caddymodules"
)

func main() {
	caddycmd.Main()
}
