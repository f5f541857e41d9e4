package caddymodules

import "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

// oneArg reads the single argument of the current (sub)directive into dst;
// a missing or extra argument is an error naming the directive. Every area's
// Caddyfile parser reads its one-value options through it.
func oneArg(d *caddyfile.Dispenser, dst *string) error {
	name := d.Val()
	if !d.NextArg() {
		return d.Errf("%s: missing value", name)
	}
	*dst = d.Val()
	if d.NextArg() {
		return d.Errf("%s: takes one value", name)
	}
	return nil
}
