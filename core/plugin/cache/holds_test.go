package cache

import "testing"

// TestHolds: held entries are not evicted; reaching a layer releases
// earlier layers' holds, not its own (until Take) nor later ones'; a new
// pass releases all; ReleaseAll frees the cache for a step that needs the
// room.
func TestHolds(t *testing.T) {
	c := New(4, LRU{})
	var h Holds
	hold := func(l, e int32) *Entry {
		t.Helper()
		en, _, err := c.Insert(Key{Layer: l, Expert: e}, 1)
		if err != nil {
			t.Fatal(err)
		}
		en.Pins++ // the read's pin, kept as the hold
		h.Add(en)
		return en
	}
	a, b, c2 := hold(1, 0), hold(2, 0), hold(3, 0)
	if _, _, err := c.Insert(Key{Layer: 9, Expert: 9}, 2); err == nil {
		t.Fatal("held entries were evicted")
	}
	if !h.Reached(2) || a.Pins != 0 || b.Pins != 1 || c2.Pins != 1 || h.Len() != 2 {
		t.Fatalf("after reaching layer 2: pins %d %d %d, %d held", a.Pins, b.Pins, c2.Pins, h.Len())
	}
	if !h.Take(b) || b.Pins != 0 || h.Len() != 1 || h.Take(b) || h.Take(a) {
		t.Fatalf("Take: pins %d, %d held", b.Pins, h.Len())
	}
	d := hold(3, 1)
	if !h.Reached(1) || c2.Pins != 0 || d.Pins != 0 || h.Len() != 0 {
		t.Fatalf("a new pass left holds: pins %d %d, %d held", c2.Pins, d.Pins, h.Len())
	}
	if h.Reached(2) {
		t.Error("released holds that did not exist")
	}
	hold(4, 0)
	hold(5, 0)
	if !h.ReleaseAll() || h.Len() != 0 {
		t.Error("ReleaseAll left holds")
	}
	if _, _, err := c.Insert(Key{Layer: 9, Expert: 9}, 4); err != nil {
		t.Errorf("after ReleaseAll: %v", err)
	}
}
