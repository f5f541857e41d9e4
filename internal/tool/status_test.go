package tool

import "testing"

// TestStatusTransient: the classification of every HTTP status an upstream
// can answer. Only 408, 425, 429 and the 5xx that may pass (not 501, 505,
// 506, 508, 510, 511) are transient; a 404 was, with every UPSTREAM_ERROR.
func TestStatusTransient(t *testing.T) {
	transient := map[int]bool{408: true, 425: true, 429: true}
	for s := 500; s <= 599; s++ {
		transient[s] = true
	}
	for _, s := range []int{501, 505, 506, 508, 510, 511} {
		delete(transient, s)
	}
	for s := 0; s <= 999; s++ {
		if got := StatusTransient(s); got != transient[s] {
			t.Errorf("StatusTransient(%d) = %v, want %v", s, got, transient[s])
		}
	}
}
