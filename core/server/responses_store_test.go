package server

import (
	"fmt"
	"testing"
)

// TestResponseStoreBounded: the store keeps the responseStoreSize most
// recently used responses; a get counts as a use.
func TestResponseStoreBounded(t *testing.T) {
	var s responseStore
	for i := range responseStoreSize {
		s.put(fmt.Sprint(i), []chatMessage{{Role: "user", Content: content{Text: fmt.Sprint(i), isSet: true}}})
	}
	if h, ok := s.get("0"); !ok || h[0].Content.Text != "0" {
		t.Fatalf("get 0: %v %v", h, ok)
	}
	s.put("new", nil) // evicts "1", the least recently used now
	if _, ok := s.get("1"); ok {
		t.Errorf("the least recently used response was kept")
	}
	for _, id := range []string{"0", "2", "new", fmt.Sprint(responseStoreSize - 1)} {
		if _, ok := s.get(id); !ok {
			t.Errorf("%s was dropped", id)
		}
	}
	if n := s.order.Len(); n != responseStoreSize || len(s.byID) != responseStoreSize {
		t.Errorf("holds %d (%d ids), want %d", n, len(s.byID), responseStoreSize)
	}
}
