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

// blockOptions remembers the options given in one block, so that an option
// given twice is an adapt error naming both lines: an option that sets a
// value would otherwise be replaced silently by the second one, the first
// a dead line a reader takes for the setting.
type blockOptions map[string]int

// once records the current option (d.Val()) and refuses it if the block
// gave it before; the options in repeatable add up and may come again.
func (b blockOptions) once(d *caddyfile.Dispenser, repeatable ...string) error {
	name := d.Val()
	for _, r := range repeatable {
		if name == r {
			return nil
		}
	}
	if line, ok := b[name]; ok {
		return d.Errf("%s: given twice (first on line %d); write it once", name, line)
	}
	b[name] = d.Line()
	return nil
}
