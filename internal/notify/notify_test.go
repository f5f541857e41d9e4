package notify

import "testing"

func TestSetAddRemoveNotify(t *testing.T) {
	var s Set
	var got []int
	r1 := s.Add(func() { got = append(got, 1) })
	s.Add(func() { got = append(got, 2) })
	s.Notify()
	r1()
	r1() // removing twice is harmless
	s.Notify()
	if want := []int{1, 2, 2}; len(got) != len(want) || got[0] != 1 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d after one removal, want 1", s.Len())
	}
}

// A listener may remove itself (or register another) while being notified.
func TestSetListenerChangesSet(t *testing.T) {
	var s Set
	var remove func()
	calls := 0
	remove = s.Add(func() { calls++; remove(); s.Add(func() {}) })
	s.Notify()
	s.Notify()
	if calls != 1 || s.Len() != 1 {
		t.Fatalf("calls = %d, Len = %d; want 1 and 1", calls, s.Len())
	}
}
