//go:build race

package engine

// raceEnabled: the race runtime maps shadow memory for the heap, which
// RLIMIT_DATA counts, so worker memory caps bite several times earlier.
const raceEnabled = true
