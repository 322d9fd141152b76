// Package k8s holds the Kubernetes manifests; this test keeps them in step
// with the configuration file and with each other.
package k8s

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/extractq/extractq/config"
	"gopkg.in/yaml.v3"
)

const image = "ghcr.io/extractq/extractq:latest"

type object = map[string]any

// load returns every YAML document of the manifests, by file.
func load(t *testing.T) map[string][]object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]object{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o != nil {
				out[f] = append(out[f], o)
			}
		}
	}
	return out
}

// get walks o along keys (string for maps, int for lists); nil if absent.
func get(o any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := o.(map[string]any)
			if !ok {
				return nil
			}
			o = m[k]
		case int:
			l, ok := o.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			o = l[k]
		}
	}
	return o
}

func find(all map[string][]object, kind, name string) object {
	for _, objs := range all {
		for _, o := range objs {
			if o["kind"] == kind && get(o, "metadata", "name") == name {
				return o
			}
		}
	}
	return nil
}

func TestManifests(t *testing.T) {
	t.Parallel()
	all := load(t)

	t.Run("ConfigMapIsDefaultConfig", func(t *testing.T) {
		t.Parallel()
		cm := find(all, "ConfigMap", "extractq-config")
		got, _ := get(cm, "data", "config.yaml").(string)
		want, err := os.ReadFile(filepath.Join("..", "..", "config", "default.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Fatal("configmap.yaml's config.yaml differs from config/default.yaml")
		}
		if _, err := config.Parse([]byte(got)); err != nil {
			t.Fatalf("config.Parse: %v", err)
		}
	})

	t.Run("ScaledObjectMatchesConfig", func(t *testing.T) {
		t.Parallel()
		so := find(all, "ScaledObject", "extractq-worker")
		if get(so, "spec", "scaleTargetRef", "name") != "extractq-worker" || find(all, "Deployment", "extractq-worker") == nil {
			t.Fatal("ScaledObject does not target the worker Deployment")
		}
		md := get(so, "spec", "triggers", 0, "metadata")
		c := config.Default()
		if get(so, "spec", "triggers", 0, "type") != "nats-jetstream" ||
			get(md, "stream") != c.NATS.Stream || get(md, "consumer") != c.NATS.Consumer {
			t.Fatalf("trigger %v does not name stream %q and consumer %q", md, c.NATS.Stream, c.NATS.Consumer)
		}
		for _, k := range []string{"natsServerMonitoringEndpoint", "account", "lagThreshold"} {
			if s, _ := get(md, k).(string); s == "" {
				t.Errorf("trigger metadata %s missing", k)
			}
		}
	})

	t.Run("Workloads", func(t *testing.T) {
		t.Parallel()
		for _, ref := range []struct{ kind, name string }{
			{"Deployment", "extractq-worker"}, {"Deployment", "extractq-triage"}, {"Deployment", "extractq-ingest"}, {"Job", "extractq-migrate"},
			{"CronJob", "extractq-retention"},
		} {
			o := find(all, ref.kind, ref.name)
			if o == nil {
				t.Errorf("%s %s missing", ref.kind, ref.name)
				continue
			}
			if ref.kind == "CronJob" {
				o, _ = get(o, "spec", "jobTemplate").(object)
			}
			ctr := get(o, "spec", "template", "spec", "containers", 0)
			// The image holds every command of cmd/ in /usr/local/bin.
			if cmd, _ := get(ctr, "command", 0).(string); cmd != "" {
				if fi, err := os.Stat(filepath.Join("..", "..", "cmd", filepath.Base(cmd))); err != nil || !fi.IsDir() {
					t.Errorf("%s: command %s is not one of cmd/", ref.name, cmd)
				}
			}
			if get(ctr, "image") != image {
				t.Errorf("%s: image %v, want %s", ref.name, get(ctr, "image"), image)
			}
			if get(ctr, "envFrom", 0, "configMapRef", "name") != "extractq-env" ||
				get(ctr, "envFrom", 1, "secretRef", "name") != "extractq-secrets" {
				t.Errorf("%s: envFrom is not extractq-env and extractq-secrets", ref.name)
			}
		}
		sec := find(all, "Secret", "extractq-secrets")
		if sec == nil {
			t.Error("secret.template.yaml does not define extractq-secrets")
		}
		// ingest serve refuses a non-loopback address without a token.
		if tok, _ := get(sec, "stringData", "INGEST_TOKEN").(string); len(tok) < 16 {
			t.Errorf("secret.template.yaml: INGEST_TOKEN %q, want a placeholder of at least 16 bytes", tok)
		}
		in := get(find(all, "Deployment", "extractq-ingest"), "spec", "template", "spec", "containers", 0)
		if cmd, _ := get(in, "command").([]any); len(cmd) < 2 || cmd[1] != "serve" ||
			get(in, "readinessProbe", "httpGet", "path") != "/readyz" || get(in, "ports", 0, "containerPort") != 8090 {
			t.Error("ingest: want ingest serve on port 8090 with a /readyz readiness probe")
		}
		w := get(find(all, "Deployment", "extractq-worker"), "spec", "template", "spec", "containers", 0)
		if get(w, "ports", 0, "containerPort") != 9090 ||
			get(w, "livenessProbe", "httpGet", "path") != "/healthz" ||
			get(w, "readinessProbe", "httpGet", "path") != "/readyz" {
			t.Error("worker: want /healthz and /readyz probes on port 9090")
		}
	})

	t.Run("KustomizationListsAllButTheSecret", func(t *testing.T) {
		t.Parallel()
		var want []string
		for f := range all {
			if f != "kustomization.yaml" && f != "secret.template.yaml" {
				want = append(want, f)
			}
		}
		var got []string
		res, _ := get(all["kustomization.yaml"][0], "resources").([]any)
		for _, r := range res {
			s, _ := r.(string)
			got = append(got, s)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("kustomization resources %v, want %v", got, want)
		}
	})
}
