// Package k8s holds the Kubernetes manifest (k3.yaml); its test decodes
// the manifest and checks what docs/deploy.md promises about it.
package k8s

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/config"
	"github.com/knadh/koanf/parsers/yaml"
)

// get walks a decoded YAML document by map keys and list indexes.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func TestManifest(t *testing.T) {
	raw, err := os.ReadFile("k3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string][]map[string]any{}
	for i, d := range strings.Split(string(raw), "\n---\n") {
		m, err := yaml.Parser().Unmarshal([]byte(d))
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		kind, _ := m["kind"].(string)
		if kind == "" || m["apiVersion"] == nil || get(t, m, "metadata", "name") == nil {
			t.Fatalf("document %d lacks kind, apiVersion or metadata.name", i)
		}
		docs[kind] = append(docs[kind], m)
	}
	for _, k := range []string{"StorageClass", "PersistentVolume", "ConfigMap", "StatefulSet", "Service"} {
		if len(docs[k]) == 0 {
			t.Fatalf("no %s", k)
		}
	}
	ss := docs["StatefulSet"][0]
	pod := get(t, ss, "spec", "template")
	c := get(t, pod, "spec", "containers", 0)

	// The Service reaches the pods and the container's port.
	sel := get(t, docs["Service"][0], "spec", "selector").(map[string]any)
	labels := get(t, pod, "metadata", "labels").(map[string]any)
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("Service selects %s=%v; the pods have %v", k, v, labels[k])
		}
	}
	if get(t, docs["Service"][0], "spec", "ports", 0, "targetPort") != get(t, c, "ports", 0, "name") {
		t.Error("the Service's targetPort is not the container's port name")
	}
	if r, _ := get(t, ss, "spec", "replicas").(int); r < 2 {
		t.Errorf("replicas %v: want several behind the Service", get(t, ss, "spec", "replicas"))
	}

	// Readiness on /health; liveness present.
	if get(t, c, "readinessProbe", "httpGet", "path") != "/health" || get(t, c, "livenessProbe") == nil {
		t.Error("want readiness on /health and a liveness probe")
	}

	// The model volume: the local class, mounted read-only at /models.
	if get(t, ss, "spec", "volumeClaimTemplates", 0, "spec", "storageClassName") != get(t, docs["StorageClass"][0], "metadata", "name") {
		t.Error("the model claim does not use the local StorageClass")
	}
	for _, pv := range docs["PersistentVolume"] {
		if get(t, pv, "spec", "local", "path") == nil || get(t, pv, "spec", "nodeAffinity") == nil {
			t.Errorf("PersistentVolume %v is not a local volume pinned to a node", get(t, pv, "metadata", "name"))
		}
	}
	mounts := get(t, c, "volumeMounts").([]any)
	found := false
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["name"] == "model" {
			found = m["mountPath"] == "/models" && m["readOnly"] == true
		}
	}
	if !found {
		t.Errorf("the model is not mounted read-only at /models: %v", mounts)
	}

	// The embedded profile loads, and the memory limit is its budget plus
	// the headroom the comments promise.
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(path, []byte(get(t, docs["ConfigMap"][0], "data", "profile.yaml").(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	prof, err := config.Load(config.Options{Profile: path, Environ: []string{}})
	if err != nil {
		t.Fatalf("the ConfigMap's profile: %v", err)
	}
	limit, err := config.ParseSize(get(t, c, "resources", "limits", "memory").(string))
	if err != nil {
		t.Fatal(err)
	}
	if want := prof.Memory.Budget + 4<<30; limit != want {
		t.Errorf("memory limit %v, want the profile's budget %v + 4G = %v", limit, prof.Memory.Budget, want)
	}
	if get(t, c, "resources", "requests", "memory") != get(t, c, "resources", "limits", "memory") {
		t.Error("memory request and limit differ: the pod could land where its budget does not fit")
	}
}
