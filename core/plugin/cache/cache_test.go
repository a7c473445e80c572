package cache_test

import (
	"errors"
	"testing"

	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

// hitRate replays a routing trace through a cache of slots units and
// returns the fraction of expert lookups that hit.
func hitRate(t *testing.T, p cache.Policy, tr plugintest.Trace, slots int) float64 {
	c := cache.New(int64(slots), p)
	var hits, total int
	for _, tok := range tr {
		for l, experts := range tok {
			for _, e := range experts {
				k := cache.Key{Layer: int32(l), Expert: int32(e)}
				total++
				if _, ok := c.Get(k); ok {
					hits++
					continue
				}
				if _, _, err := c.Insert(k, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return float64(hits) / float64(total)
}

// A token touches layers×k units; with a cache smaller than that, LRU
// evicts each unit just before its layer comes round again, while LFRU keeps
// the experts the router prefers.
func TestLFRUBeatsLRUOnSkewedRouting(t *testing.T) {
	const layers, experts, k = 12, 64, 8
	tr := plugintest.ZipfTrace(11, 400, layers, experts, k, 1.0)
	for _, tc := range []struct {
		name  string
		slots int
	}{
		{"cache a third of one token", layers * k / 3},
		{"cache 3/4 of one token", layers * k * 3 / 4},
		{"cache two tokens", layers * k * 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lru := hitRate(t, cache.LRU{}, tr, tc.slots)
			lfru := hitRate(t, cache.LFRU{HalfLife: float64(8 * tc.slots)}, tr, tc.slots)
			t.Logf("slots %d: LRU %.1f%% hits, LFRU %.1f%%", tc.slots, 100*lru, 100*lfru)
			if lfru <= lru {
				t.Errorf("LFRU %.3f does not beat LRU %.3f", lfru, lru)
			}
			if tc.slots < layers*k && lfru < 2*lru+0.05 {
				t.Errorf("with the working set over the cache, LFRU %.3f should be far above LRU %.3f", lfru, lru)
			}
		})
	}
}

func TestPinnedNeverEvicted(t *testing.T) {
	for _, p := range []cache.Policy{cache.LRU{}, cache.LFRU{HalfLife: 4}} {
		t.Run(p.Name(), func(t *testing.T) {
			c := cache.New(3, p)
			a, _, _ := c.Insert(cache.Key{Expert: 0}, 1)
			a.Pins++
			c.Insert(cache.Key{Expert: 1}, 1)
			c.Insert(cache.Key{Expert: 2}, 1)
			for i := int32(3); i < 20; i++ {
				_, ev, err := c.Insert(cache.Key{Expert: i}, 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ev {
					if e == a {
						t.Fatal("evicted a pinned entry")
					}
				}
			}
			if _, ok := c.Peek(a.Key); !ok {
				t.Fatal("pinned entry gone")
			}
			// Pin everything: the next insert must fail and evict nothing.
			c.Entries(func(e *cache.Entry) { e.Pins++ })
			n := c.Len()
			if _, ev, err := c.Insert(cache.Key{Expert: 99}, 1); !errors.Is(err, cache.ErrFull) || len(ev) != 0 || c.Len() != n {
				t.Errorf("insert into a pinned cache: %v, evicted %d", err, len(ev))
			}
		})
	}
}

func TestEvictionOrder(t *testing.T) {
	keys := func(es []*cache.Entry) []int32 {
		var out []int32
		for _, e := range es {
			out = append(out, e.Key.Expert)
		}
		return out
	}
	tests := []struct {
		name   string
		policy cache.Policy
		want   int32 // the victim after: insert 0,1,2; get 0 ×3; get 1; insert 3
	}{
		{"lru evicts the oldest access", cache.LRU{}, 2},
		{"lfru evicts the least frequent", cache.LFRU{HalfLife: 100}, 2},
		{"lfru with a short half-life acts like lru", cache.LFRU{HalfLife: 0.01}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cache.New(3, tc.policy)
			for i := int32(0); i < 3; i++ {
				c.Insert(cache.Key{Expert: i}, 1)
			}
			for range 3 {
				c.Get(cache.Key{Expert: 0})
			}
			c.Get(cache.Key{Expert: 1})
			_, ev, err := c.Insert(cache.Key{Expert: 3}, 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(ev); len(got) != 1 || got[0] != tc.want {
				t.Errorf("evicted %v, want [%d]", got, tc.want)
			}
		})
	}
	// Frequency beats recency: 0 was used often but not lately, 1 once
	// lately; LFRU keeps 0, LRU does not.
	c := cache.New(2, cache.LFRU{HalfLife: 100})
	c.Insert(cache.Key{Expert: 0}, 1)
	for range 5 {
		c.Get(cache.Key{Expert: 0})
	}
	c.Insert(cache.Key{Expert: 1}, 1)
	if _, ev, _ := c.Insert(cache.Key{Expert: 2}, 1); keys(ev)[0] != 1 {
		t.Errorf("LFRU evicted %v, want the once-used 1", keys(ev))
	}
}
