// Package k8s holds the Kubernetes manifests; this test renders every
// kustomization (base, overlays/dev, overlays/production), decodes every
// object strictly into its Go API type, and keeps the manifests in step
// with the configuration and with each other.
package k8s

import (
	"bufio"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/extractq/extractq/config"
)

const image = "ghcr.io/extractq/extractq:latest"

// configMap returns the ConfigMap generated as name (its hash suffix
// aside), or nil.
func (r *rendered) configMap(name string) *corev1.ConfigMap {
	for _, cm := range r.configMaps {
		if cm.Name == name || strings.HasPrefix(cm.Name, name+"-") && !strings.Contains(cm.Name[len(name)+1:], "-") {
			return cm
		}
	}
	return nil
}

// env returns the variables a container gets from the ConfigMaps of its
// envFrom, later ones over earlier ones, then its env values.
func (r *rendered) env(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		for _, cm := range r.configMaps {
			if cm.Name == ef.ConfigMapRef.Name {
				for k, v := range cm.Data {
					out[k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			out[e.Name] = e.Value
		}
	}
	return out
}

// overlayConfig is a kustomization's configuration file, parsed by the
// config package.
type overlayConfig struct {
	cfg *config.Config
}

// loadConfig parses the config.yaml of r's ConfigMap extractq-config.
func loadConfig(t *testing.T, r *rendered) *overlayConfig {
	t.Helper()
	cm := r.configMap("extractq-config")
	if cm == nil {
		t.Fatalf("%s: no ConfigMap extractq-config", r.dir)
	}
	c, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("%s: config.yaml: config.Parse: %v", r.dir, err)
	}
	return &overlayConfig{cfg: c}
}

// consumers returns the durable consumers the workers of oc read
// (config.Config.WorkerConsumers): with nats.consumers shared,
// nats.consumer; with per_schema, "<consumer>-<schema id>" for every
// schema, or for schema alone when a pool serves one (worker.schema,
// WORKER_SCHEMA).
func (oc *overlayConfig) consumers(schema string) []string {
	c := *oc.cfg
	c.Worker.Schema = schema
	var out []string
	for _, spec := range c.WorkerConsumers() {
		out = append(out, spec.Name)
	}
	return out
}

func TestManifests(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			if t.Failed() {
				t.FailNow()
			}
			checkOverlay(t, r)
		})
	}
}

// podSpec is a workload's pod template, by the workload's name.
type podSpec struct {
	name string
	spec corev1.PodSpec
}

func checkOverlay(t *testing.T, r *rendered) {
	oc := loadConfig(t, r)
	c := oc.cfg
	production := r.dir == "overlays/production"

	t.Run("Config", func(t *testing.T) {
		want := 3
		if r.dir == "overlays/dev" {
			want = 1
		}
		if c.NATS.Replicas != want {
			t.Errorf("nats.replicas %d, want %d", c.NATS.Replicas, want)
		}
		if production && oc.cfg.NATS.Consumers != "per_schema" {
			t.Errorf("nats.consumers %q, want per_schema: the production overlay runs a pool per schema", oc.cfg.NATS.Consumers)
		}
	})

	// Every replica the cluster may run fits the connection budget: the
	// worker pools' max_replicas is the sum of their ScaledObjects'
	// maxReplicaCount (plus nothing: their rolling updates surge within
	// it), as is provider.max_replicas; ingest's and triage's at least
	// their replicas and a surge of one.
	t.Run("ConnectionBudgetFitsReplicas", func(t *testing.T) {
		pg := c.Postgres
		var workers int
		for _, so := range r.scaledObjects {
			if so.Spec.MaxReplicaCount == nil {
				t.Errorf("ScaledObject %s: no maxReplicaCount", so.Name)
				continue
			}
			workers += int(*so.Spec.MaxReplicaCount)
		}
		if pg.Pools["worker"].MaxReplicas != workers || c.Provider.MaxReplicas != workers {
			t.Errorf("postgres.pools.worker.max_replicas %d, provider.max_replicas %d; the ScaledObjects' maxReplicaCount add up to %d",
				pg.Pools["worker"].MaxReplicas, c.Provider.MaxReplicas, workers)
		}
		for _, name := range []string{"ingest", "triage"} {
			d := byName(r.deployments, "extractq-"+name)
			if d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas == 0 {
				t.Errorf("Deployment extractq-%s: no replicas", name)
				continue
			}
			if replicas := int(*d.Spec.Replicas); pg.Pools[name].MaxReplicas < replicas+1 {
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

	// Each pool of workers scales on the consumers it reads, and every
	// consumer of the configuration has a pool scaling on it.
	t.Run("ScaledObjectsMatchConfig", func(t *testing.T) {
		if len(r.scaledObjects) == 0 {
			t.Fatal("no ScaledObject")
		}
		var scaled []string
		for _, so := range r.scaledObjects {
			if so.Spec.ScaleTargetRef == nil {
				t.Errorf("ScaledObject %s: no scaleTargetRef", so.Name)
				continue
			}
			d := byName(r.deployments, so.Spec.ScaleTargetRef.Name)
			if d == nil || d.Labels["app.kubernetes.io/component"] != "worker" {
				t.Errorf("ScaledObject %s targets %q, not a worker Deployment", so.Name, so.Spec.ScaleTargetRef.Name)
				continue
			}
			if d.Spec.Replicas != nil {
				t.Errorf("Deployment %s sets replicas: KEDA owns them", d.Name)
			}
			reads := oc.consumers(r.env(d.Spec.Template.Spec.Containers[0])["WORKER_SCHEMA"])
			for i, tr := range so.Spec.Triggers {
				md := tr.Metadata
				if tr.Type != "nats-jetstream" || md["stream"] != c.NATS.Stream {
					t.Errorf("ScaledObject %s trigger %d: type %q stream %q, want nats-jetstream on %q", so.Name, i, tr.Type, md["stream"], c.NATS.Stream)
				}
				if !slices.Contains(reads, md["consumer"]) {
					t.Errorf("ScaledObject %s scales %s on consumer %q; it reads %v", so.Name, d.Name, md["consumer"], reads)
				}
				scaled = append(scaled, md["consumer"])
				for k, required := range natsJetStreamMetadata {
					if _, ok := md[k]; required && !ok {
						t.Errorf("ScaledObject %s trigger %d: metadata %s missing", so.Name, i, k)
					}
				}
				for k := range md {
					if _, ok := natsJetStreamMetadata[k]; !ok {
						t.Errorf("ScaledObject %s trigger %d: metadata %s is not one of the nats-jetstream scaler's", so.Name, i, k)
					}
				}
				if md["lagThreshold"] == "" || md["account"] == "" {
					t.Errorf("ScaledObject %s trigger %d: set lagThreshold and account", so.Name, i)
				}
			}
		}
		for _, want := range oc.consumers("") {
			if !slices.Contains(scaled, want) {
				t.Errorf("no ScaledObject scales on consumer %q (the configuration's consumers: %v)", want, oc.consumers(""))
			}
		}
	})

	t.Run("Workloads", func(t *testing.T) {
		built := imageCommands(t)
		var specs []podSpec
		for _, d := range r.deployments {
			specs = append(specs, podSpec{d.Name, d.Spec.Template.Spec})
		}
		for _, j := range r.jobs {
			specs = append(specs, podSpec{j.Name, j.Spec.Template.Spec})
		}
		for _, cj := range r.cronJobs {
			specs = append(specs, podSpec{cj.Name, cj.Spec.JobTemplate.Spec.Template.Spec})
		}
		for _, name := range []string{"extractq-worker", "extractq-triage", "extractq-ingest", "extractq-migrate", "extractq-retention"} {
			if !slices.ContainsFunc(specs, func(s podSpec) bool { return s.name == name }) {
				t.Errorf("%s missing", name)
			}
		}
		for _, s := range specs {
			ctr := s.spec.Containers[0]
			// The image holds the product's commands, those the Dockerfile
			// builds, in /usr/local/bin.
			if len(ctr.Command) == 0 || !slices.Contains(built, filepath.Base(ctr.Command[0])) || filepath.Dir(ctr.Command[0]) != "/usr/local/bin" {
				t.Errorf("%s: command %v is not one the image holds (%v)", s.name, ctr.Command, built)
			}
			if ctr.Image != image {
				t.Errorf("%s: image %s, want %s", s.name, ctr.Image, image)
			}
			if len(ctr.EnvFrom) < 2 || ctr.EnvFrom[0].ConfigMapRef == nil || r.configMap("extractq-env") == nil ||
				ctr.EnvFrom[0].ConfigMapRef.Name != r.configMap("extractq-env").Name ||
				ctr.EnvFrom[1].SecretRef == nil || ctr.EnvFrom[1].SecretRef.Name != "extractq-secrets" {
				t.Errorf("%s: envFrom is not extractq-env and extractq-secrets", s.name)
			}
			for _, ef := range ctr.EnvFrom {
				if ef.ConfigMapRef != nil && !slices.ContainsFunc(r.configMaps, func(cm *corev1.ConfigMap) bool { return cm.Name == ef.ConfigMapRef.Name }) {
					t.Errorf("%s: envFrom ConfigMap %s is not rendered", s.name, ef.ConfigMapRef.Name)
				}
			}
		}
		// The commands that connect to NATS mount its files' Secret:
		// optional but in production, where the credentials file is
		// required and named by NATS_CREDS.
		for _, d := range r.deployments {
			spec := d.Spec.Template.Spec
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "nats" })
			mounted := slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.Name == "nats" && m.MountPath == "/etc/extractq-nats"
			})
			if i < 0 || !mounted || spec.Volumes[i].Secret == nil || spec.Volumes[i].Secret.SecretName != "extractq-nats" ||
				spec.Volumes[i].Secret.Optional == nil || *spec.Volumes[i].Secret.Optional == production {
				t.Errorf("%s: want the Secret extractq-nats mounted at /etc/extractq-nats, optional: %v", d.Name, !production)
			}
			creds := r.env(spec.Containers[0])["NATS_CREDS"]
			if production != (creds != "") || creds != "" && !strings.HasPrefix(creds, "/etc/extractq-nats/") {
				t.Errorf("%s: NATS_CREDS %q; want the creds file of /etc/extractq-nats in production only", d.Name, creds)
			}
		}
		in := byName(r.deployments, "extractq-ingest").Spec.Template.Spec.Containers[0]
		if len(in.Command) < 2 || in.Command[1] != "serve" || !slices.Contains(in.Command, "-metrics-addr") ||
			in.ReadinessProbe == nil || in.ReadinessProbe.HTTPGet.Path != "/readyz" || in.Ports[0].ContainerPort != 8090 {
			t.Error("ingest: want ingest serve on port 8090 with a /readyz readiness probe and -metrics-addr")
		}
		tr := byName(r.deployments, "extractq-triage").Spec.Template.Spec.Containers[0]
		if tr.ReadinessProbe == nil || tr.ReadinessProbe.HTTPGet.Path != "/readyz" || tr.ReadinessProbe.HTTPGet.Port.String() != "metrics" {
			t.Error("triage: want a /readyz readiness probe on its metrics port (served while the UI is on loopback)")
		}
		for _, d := range r.deployments {
			if d.Labels["app.kubernetes.io/component"] != "worker" {
				continue
			}
			w := d.Spec.Template.Spec.Containers[0]
			if w.Ports[0].ContainerPort != 9090 || w.LivenessProbe == nil || w.LivenessProbe.HTTPGet.Path != "/healthz" ||
				w.ReadinessProbe == nil || w.ReadinessProbe.HTTPGet.Path != "/readyz" {
				t.Errorf("%s: want /healthz and /readyz probes on port 9090", d.Name)
			}
		}
	})

	// Metrics are served on a port of their own, named metrics, that a
	// PodMonitor scrapes, and that no Service or Ingress exposes.
	t.Run("MetricsPrivate", func(t *testing.T) {
		for _, d := range r.deployments {
			ctr := d.Spec.Template.Spec.Containers[0]
			if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
				t.Errorf("%s: no container port named metrics", d.Name)
			}
			podLabels := labels.Set(d.Spec.Template.Labels)
			var scraped bool
			for _, pm := range r.podMonitors {
				sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(podLabels) && slices.ContainsFunc(pm.Spec.PodMetricsEndpoints, func(e monv1.PodMetricsEndpoint) bool {
					return e.Port != nil && *e.Port == "metrics"
				}) {
					scraped = true
				}
			}
			if !scraped {
				t.Errorf("%s: no PodMonitor scrapes its metrics port", d.Name)
			}
		}
		for _, s := range r.services {
			for _, p := range s.Spec.Ports {
				if p.Name == "metrics" || p.TargetPort.String() == "metrics" || p.Port == 9090 || p.Port == 9091 || p.Port == 9092 {
					t.Errorf("Service %s exposes the metrics port (%s)", s.Name, p.Name)
				}
			}
		}
	})

	t.Run("DisruptionBudgets", func(t *testing.T) {
		for _, d := range r.deployments {
			var n int
			for _, pdb := range r.pdbs {
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					n++
					if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
						t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1", pdb.Name)
					}
				}
			}
			if n != 1 {
				t.Errorf("%s: %d PodDisruptionBudgets select its pods, want 1", d.Name, n)
			}
		}
	})

	t.Run("NetworkPolicies", func(t *testing.T) {
		checkNetworkPolicies(t, r)
	})

	t.Run("Ingress", func(t *testing.T) {
		u, err := url.Parse(r.configMap("extractq-env").Data["TRIAGE_PUBLIC_URL"])
		if err != nil {
			t.Fatal(err)
		}
		if !production {
			if len(r.ingresses) > 0 {
				t.Errorf("%s has an Ingress; only production does", r.dir)
			}
			return
		}
		ing := byName(r.ingresses, "extractq-triage")
		if ing == nil {
			t.Fatal("no Ingress extractq-triage")
		}
		if u.Scheme != "https" {
			t.Errorf("TRIAGE_PUBLIC_URL %s: want https behind the TLS Ingress", u)
		}
		if len(ing.Spec.TLS) != 1 || !slices.Contains(ing.Spec.TLS[0].Hosts, u.Hostname()) || ing.Spec.TLS[0].SecretName == "" {
			t.Errorf("Ingress TLS %+v does not cover %s with a certificate Secret", ing.Spec.TLS, u.Hostname())
		}
		for _, rule := range ing.Spec.Rules {
			if rule.Host != u.Hostname() {
				t.Errorf("Ingress host %s, TRIAGE_PUBLIC_URL's %s", rule.Host, u.Hostname())
			}
			for _, p := range rule.HTTP.Paths {
				b := p.Backend.Service
				if b == nil || b.Name != "extractq-triage" || b.Port.Name != "http" {
					t.Errorf("Ingress path %s: backend %+v, want extractq-triage's http port", p.Path, p.Backend)
				}
			}
		}
	})
}

// checkNetworkPolicies checks that every pod is denied by default, may
// resolve names, and that the workers reach NATS, Postgres and the
// provider (HTTPS to public addresses) only.
func checkNetworkPolicies(t *testing.T, r *rendered) {
	deny := byName(r.netpols, "extractq-default-deny")
	if deny == nil || len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 ||
		!slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) ||
		len(deny.Spec.Ingress)+len(deny.Spec.Egress) != 0 {
		t.Error("want extractq-default-deny: every pod, ingress and egress, nothing allowed")
	}
	dns := byName(r.netpols, "extractq-dns")
	if dns == nil || len(dns.Spec.Egress) != 1 || !slices.ContainsFunc(dns.Spec.Egress[0].Ports, func(p networkingv1.NetworkPolicyPort) bool {
		return p.Port != nil && p.Port.IntValue() == 53 && p.Protocol != nil && *p.Protocol == corev1.ProtocolUDP
	}) {
		t.Error("want extractq-dns: every pod may reach the cluster's DNS on port 53")
	}
	w := byName(r.netpols, "extractq-worker")
	if w == nil {
		t.Fatal("no NetworkPolicy extractq-worker")
	}
	for _, d := range r.deployments {
		if d.Labels["app.kubernetes.io/component"] != "worker" {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&w.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy extractq-worker does not select %s", d.Name)
		}
	}
	peers := map[string]int32{}
	for _, e := range w.Spec.Egress {
		if len(e.To) != 1 || len(e.Ports) != 1 || e.Ports[0].Port == nil {
			t.Errorf("extractq-worker egress %+v: want one peer and one port a rule", e)
			continue
		}
		port := e.Ports[0].Port.IntVal
		switch to := e.To[0]; {
		case to.NamespaceSelector != nil:
			peers[to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]] = port
		case to.IPBlock != nil && to.IPBlock.CIDR == "0.0.0.0/0" && slices.Contains(to.IPBlock.Except, "10.0.0.0/8"):
			peers["provider"] = port
		default:
			t.Errorf("extractq-worker egress to %+v", to)
		}
	}
	if want := map[string]int32{"nats": 4222, "postgres": 5432, "provider": 443}; !mapsEqual(peers, want) {
		t.Errorf("the workers reach %v, want %v only", peers, want)
	}
	// Every pod template is selected by a policy of its own beside the
	// default deny and DNS.
	templates := map[string]map[string]string{}
	for _, d := range r.deployments {
		templates[d.Name] = d.Spec.Template.Labels
	}
	for _, j := range r.jobs {
		templates[j.Name] = j.Spec.Template.Labels
	}
	for _, cj := range r.cronJobs {
		templates[cj.Name] = cj.Spec.JobTemplate.Spec.Template.Labels
	}
	for name, l := range templates {
		var own bool
		for _, np := range r.netpols {
			if np.Name == "extractq-default-deny" || np.Name == "extractq-dns" {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil {
				t.Fatal(err)
			}
			own = own || sel.Matches(labels.Set(l))
		}
		if !own {
			t.Errorf("%s: no NetworkPolicy allows its traffic", name)
		}
	}
}

func mapsEqual(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The Secret template is not applied by kustomize; it still decodes
// strictly and holds what the commands read.
func TestSecretTemplate(t *testing.T) {
	t.Parallel()
	var sec corev1.Secret
	decodeFile(t, filepath.Join("base", "secret.template.yaml"), &sec)
	for _, k := range []string{"DATABASE_URL", "LLM_API_KEY"} {
		if sec.StringData[k] == "" {
			t.Errorf("secret.template.yaml: %s missing", k)
		}
	}
	// ingest serve refuses a non-loopback address without a token.
	if tok := sec.StringData["INGEST_TOKEN"]; len(tok) < 16 {
		t.Errorf("secret.template.yaml: INGEST_TOKEN %q, want a placeholder of at least 16 bytes", tok)
	}
}

// TestNATSValues checks the NATS Helm values against the keys the chart
// documents (testdata/nats-chart-values-keys.txt) and against the
// overlays' nats.replicas.
func TestNATSValues(t *testing.T) {
	t.Parallel()
	documented := chartKeys(t)
	for _, tc := range []struct {
		file     string
		overlay  string
		cluster  bool
		replicas int
	}{
		{"values-production.yaml", "overlays/production", true, 3},
		{"values-dev.yaml", "overlays/dev", false, 1},
	} {
		b, err := os.ReadFile(filepath.Join("nats", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.UnmarshalStrict(b, &v); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		for _, k := range leafKeys("", v) {
			if !documented(k) {
				t.Errorf("%s: %s is not a key the NATS chart documents", tc.file, k)
			}
		}
		get := func(path ...string) any {
			var o any = v
			for _, p := range path {
				m, _ := o.(map[string]any)
				o = m[p]
			}
			return o
		}
		if get("config", "jetstream", "enabled") != true || get("config", "monitor", "enabled") != true {
			t.Errorf("%s: want config.jetstream and config.monitor enabled (the stream; KEDA reads /jsz)", tc.file)
		}
		servers := 1
		if get("config", "cluster", "enabled") == true {
			n, _ := get("config", "cluster", "replicas").(float64)
			servers = int(n)
		}
		c := loadConfig(t, render(t, tc.overlay)).cfg
		if c.NATS.Replicas != tc.replicas || servers < c.NATS.Replicas || tc.cluster != (servers > 1) {
			t.Errorf("%s: %d servers; %s's nats.replicas is %d, want %d", tc.file, servers, tc.overlay, c.NATS.Replicas, tc.replicas)
		}
	}
}

// chartKeys reads the documented keys and returns whether a dotted path
// is one of them or lies under a free-form map ("X.*").
func chartKeys(t *testing.T) func(string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "nats-chart-values-keys.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]bool{}
	var open []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if p, ok := strings.CutSuffix(line, ".*"); ok {
			open = append(open, p+".")
			keys[p] = true
			continue
		}
		keys[line] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return func(k string) bool {
		return keys[k] || slices.ContainsFunc(open, func(p string) bool { return strings.HasPrefix(k, p) })
	}
}

// leafKeys returns the dotted paths of v's values that are not maps.
func leafKeys(prefix string, v map[string]any) []string {
	var out []string
	for k, x := range v {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		if m, ok := x.(map[string]any); ok && len(m) > 0 {
			out = append(out, leafKeys(p, m)...)
			continue
		}
		out = append(out, p)
	}
	return out
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
