//go:build !race

package caddymodules

const raceEnabled = false
