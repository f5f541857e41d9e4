package caddymodules

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

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
// a dead line a reader takes for the setting. Two spellings of one option
// (optionSpellings) are the option given twice.
type blockOptions map[string]given

type given struct {
	line     int
	spelling string // as written
}

// optionSpellings maps an option's other spelling to its name. The other
// spellings are unique among the options of all blocks, so one table
// serves every block.
var optionSpellings = map[string]string{
	"adapter":           "engine",       // sandbox
	"key_rotation_days": "key_rotation", // auth's local
	"redis":             "storage",      // broker (the former spelling of storage redis)
	"embedding":         "search",       // meta (the former spelling of search)
}

// once records the current option (d.Val()) and refuses it if the block
// gave it before, in either spelling; the options in repeatable add up and
// may come again.
func (b blockOptions) once(d *caddyfile.Dispenser, repeatable ...string) error {
	name := d.Val()
	for _, r := range repeatable {
		if name == r {
			return nil
		}
	}
	key := name
	if canonical, ok := optionSpellings[name]; ok {
		key = canonical
	}
	if g, ok := b[key]; ok {
		if g.spelling != name {
			return d.Errf("%s: given twice (first on line %d, as %s); write it once", name, g.line, g.spelling)
		}
		return d.Errf("%s: given twice (first on line %d); write it once", name, g.line)
	}
	b[key] = given{line: d.Line(), spelling: name}
	return nil
}

// positiveIntArg reads the count of an option whose absent (JSON: 0) value
// is its default: an explicit 0 would silently be that default, so it is
// refused as an explicit 0 duration is, naming what to write instead.
func positiveIntArg(d *caddyfile.Dispenser, dst *int) error {
	name, s := d.Val(), ""
	if err := oneArg(d, &s); err != nil {
		return err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return d.Errf("%s: %q is not a positive integer (leave the option out for its default)", name, s)
	}
	*dst = n
	return nil
}
