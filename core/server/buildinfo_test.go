package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/k3-inference/k3/core/server"
)

// TestMetricsBuildInfo: /metrics names the running build, as Prometheus
// exporters do with a *_build_info gauge, so a dashboard shows which
// version served which numbers.
func TestMetricsBuildInfo(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	_, _, m := ts.do(t, "GET", "/metrics", "")
	bi := buildinfo.Get()
	want := fmt.Sprintf("\nk3_build_info{version=%q,revision=%q,go=%q} 1\n", bi.Version, bi.ShortRevision(), bi.Go)
	if !strings.Contains(string(m), want) || !strings.Contains(string(m), "# TYPE k3_build_info gauge\n") {
		t.Errorf("/metrics lacks %q:\n%s", want, m)
	}
}
