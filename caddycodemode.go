// Package caddycodemode is the Caddy plugin: importing it registers every
// codemode module, directive and subcommand (they live in ./caddymodules).
// It is the package xcaddy builds in, so a release binary is
//
//	xcaddy build v2.11.9 --with github.com/codemode-gateway/caddy-codemode@<version>
//
// (or `--with github.com/codemode-gateway/caddy-codemode=./` from a checkout).
package caddycodemode

import _ "github.com/codemode-gateway/caddy-codemode/caddymodules"
