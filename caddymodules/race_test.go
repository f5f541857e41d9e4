//go:build race

package caddymodules

// raceEnabled: under the race detector sync.Pool drops a share of what is
// put back at random, so a pooled object is sometimes allocated anew.
const raceEnabled = true
