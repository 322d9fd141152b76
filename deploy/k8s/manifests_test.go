// Package k8s holds the Kubernetes manifests; this test keeps them in step
// with the configuration file and with each other.
package k8s

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
		// The differences: the stream's replicas, 3 for a JetStream
		// cluster of three servers, and the connection budget of a
		// server with max_connections 100.
		w := strings.Replace(string(want), "  replicas: 1 ", "  replicas: 3 ", 1)
		w = strings.Replace(w, "  max_connections: 0 ", "  max_connections: 97", 1)
		w = strings.Replace(w, "  max_replicas: 1  ", "  max_replicas: 20 ", 1)
		if got != w {
			t.Fatal("configmap.yaml's config.yaml differs from config/default.yaml other than by nats.replicas: 3, postgres.max_connections: 97 and provider.max_replicas: 20")
		}
		c, err := config.Parse([]byte(got))
		if err != nil {
			t.Fatalf("config.Parse: %v", err)
		}
		if c.NATS.Replicas != 3 {
			t.Fatalf("configmap.yaml: nats.replicas %d, want 3", c.NATS.Replicas)
		}
	})

	// Every replica the cluster may run fits the connection budget: the
	// worker's max_replicas is the ScaledObject's maxReplicaCount (plus
	// nothing: its rolling update surges within it), ingest's and
	// triage's at least their replicas and a surge of one.
	t.Run("ConnectionBudgetFitsReplicas", func(t *testing.T) {
		t.Parallel()
		cm := find(all, "ConfigMap", "extractq-config")
		c, err := config.Parse([]byte(get(cm, "data", "config.yaml").(string)))
		if err != nil {
			t.Fatal(err)
		}
		pg := c.Postgres
		so := find(all, "ScaledObject", "extractq-worker")
		if want, _ := get(so, "spec", "maxReplicaCount").(int); pg.Pools["worker"].MaxReplicas != want || c.Provider.MaxReplicas != want {
			t.Errorf("postgres.pools.worker.max_replicas %d, provider.max_replicas %d; the ScaledObject's maxReplicaCount is %d",
				pg.Pools["worker"].MaxReplicas, c.Provider.MaxReplicas, want)
		}
		for _, name := range []string{"ingest", "triage"} {
			replicas, _ := get(find(all, "Deployment", "extractq-"+name), "spec", "replicas").(int)
			if replicas == 0 || pg.Pools[name].MaxReplicas < replicas+1 {
				t.Errorf("postgres.pools.%s.max_replicas %d; its Deployment runs %d (and one more in a rolling update)", name, pg.Pools[name].MaxReplicas, replicas)
			}
		}
		for _, name := range config.PoolCommands {
			if _, err := pg.PoolSize(name); err != nil {
				t.Error(err)
			}
		}
		if pg.Total() > pg.MaxConnections {
			t.Errorf("the pools and the reserve hold %d connections, over postgres.max_connections %d", pg.Total(), pg.MaxConnections)
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
		built := imageCommands(t)
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
			// The image holds the product's commands, those the Dockerfile
			// builds, in /usr/local/bin.
			if cmd, _ := get(ctr, "command", 0).(string); cmd != "" {
				if !slices.Contains(built, filepath.Base(cmd)) || filepath.Dir(cmd) != "/usr/local/bin" {
					t.Errorf("%s: command %s is not one the image holds (%v)", ref.name, cmd, built)
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
		// The commands that connect to NATS mount its files' Secret.
		for _, name := range []string{"extractq-worker", "extractq-triage", "extractq-ingest"} {
			spec := get(find(all, "Deployment", name), "spec", "template", "spec")
			vols, _ := get(spec, "volumes").([]any)
			mounts, _ := get(spec, "containers", 0, "volumeMounts").([]any)
			if !slices.ContainsFunc(vols, func(v any) bool {
				return get(v, "name") == "nats" && get(v, "secret", "secretName") == "extractq-nats" && get(v, "secret", "optional") == true
			}) || !slices.ContainsFunc(mounts, func(m any) bool {
				return get(m, "name") == "nats" && get(m, "mountPath") == "/etc/extractq-nats"
			}) {
				t.Errorf("%s: want the optional Secret extractq-nats mounted at /etc/extractq-nats", name)
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

// imageCommands returns the names of the commands the Dockerfile builds
// into the image: the packages of its go build line, each ./cmd/<name>.
func imageCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.ReplaceAll(string(b), "\\\n", " ")
	var out []string
	for _, line := range strings.Split(joined, "\n") {
		_, args, ok := strings.Cut(line, "go build ")
		if !ok || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, f := range strings.Fields(args) {
			if !strings.HasPrefix(f, "./") {
				continue
			}
			name, ok := strings.CutPrefix(f, "./cmd/")
			if !ok || name == "" || strings.ContainsAny(name, "/.") {
				t.Errorf("Dockerfile builds %s: the image holds the product's commands, ./cmd/<name>, only", f)
				continue
			}
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		t.Fatal("Dockerfile: no go build line naming ./cmd/<name> packages")
	}
	return out
}

// TestImage checks that the image holds the product's commands and
// nothing else: the Dockerfile builds every command of cmd/ (a new one
// must not be left out of the image) and none of them links a package of
// devtools (the harnesses, the LLM simulator).
func TestImage(t *testing.T) {
	t.Parallel()
	built := imageCommands(t)
	entries, err := os.ReadDir(filepath.Join("..", "..", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		// cmd/internal holds the commands' shared wiring, not a command.
		if e.IsDir() && e.Name() != "internal" {
			dirs = append(dirs, e.Name())
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(built)), dirs) {
		t.Errorf("Dockerfile builds %v; cmd/ holds %v", built, dirs)
	}
	args := []string{"list", "-deps"}
	for _, c := range built {
		args = append(args, "../../cmd/"+c)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/extractq/extractq/devtools") {
			t.Errorf("the image's commands link %s", pkg)
		}
	}
}
