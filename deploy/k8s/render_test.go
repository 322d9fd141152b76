package k8s

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	monv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizations are the directories `kubectl apply -k` takes: the base
// and each overlay.
var kustomizations = []string{"base", "overlays/dev", "overlays/production"}

// rendered is one kustomization's output, every object decoded into its
// Go API type.
type rendered struct {
	dir           string
	namespaces    []*corev1.Namespace
	configMaps    []*corev1.ConfigMap
	services      []*corev1.Service
	deployments   []*appsv1.Deployment
	jobs          []*batchv1.Job
	cronJobs      []*batchv1.CronJob
	pdbs          []*policyv1.PodDisruptionBudget
	netpols       []*networkingv1.NetworkPolicy
	ingresses     []*networkingv1.Ingress
	podMonitors   []*monv1.PodMonitor
	svcMonitors   []*monv1.ServiceMonitor
	scaledObjects []*ScaledObject
}

// kustomizeMu runs one kustomize build at a time: kyaml's openapi
// package initialises a package-global schema lazily and without a lock,
// so two builds at once race (kubernetes-sigs/kustomize#5805, #4824).
var kustomizeMu sync.Mutex

// render builds dir with kustomize's Go API, as `kubectl apply -k` does,
// and decodes each object strictly (sigs.k8s.io/yaml.UnmarshalStrict: a
// field its type does not have is an error) into the type of its
// apiVersion and kind; a kind with no type here is an error too.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	// Resource methods (CurId, AsYAML) read the same schema: hold the
	// lock until every object is decoded.
	kustomizeMu.Lock()
	defer kustomizeMu.Unlock()
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{dir: dir}
	for _, res := range m.Resources() {
		b, err := res.AsYAML()
		if err != nil {
			t.Fatalf("%s: %s: %v", dir, res.CurId(), err)
		}
		gvk := res.GetGvk()
		if err := r.add(gvk.ApiVersion()+"/"+gvk.Kind, b); err != nil {
			t.Errorf("%s: %s %s: %v", dir, gvk.Kind, res.GetName(), err)
		}
	}
	return r
}

// add decodes b strictly into the type of kind ("apiVersion/Kind").
func (r *rendered) add(kind string, b []byte) error {
	switch kind {
	case "v1/Namespace":
		return decodeInto(b, &r.namespaces)
	case "v1/ConfigMap":
		return decodeInto(b, &r.configMaps)
	case "v1/Service":
		return decodeInto(b, &r.services)
	case "apps/v1/Deployment":
		return decodeInto(b, &r.deployments)
	case "batch/v1/Job":
		return decodeInto(b, &r.jobs)
	case "batch/v1/CronJob":
		return decodeInto(b, &r.cronJobs)
	case "policy/v1/PodDisruptionBudget":
		return decodeInto(b, &r.pdbs)
	case "networking.k8s.io/v1/NetworkPolicy":
		return decodeInto(b, &r.netpols)
	case "networking.k8s.io/v1/Ingress":
		return decodeInto(b, &r.ingresses)
	case "monitoring.coreos.com/v1/PodMonitor":
		return decodeInto(b, &r.podMonitors)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return decodeInto(b, &r.svcMonitors)
	case "keda.sh/v1alpha1/ScaledObject":
		return decodeInto(b, &r.scaledObjects)
	}
	return fmt.Errorf("no Go type for %s here: add one to rendered.add", kind)
}

func decodeInto[T any](b []byte, to *[]*T) error {
	v := new(T)
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		return err
	}
	*to = append(*to, v)
	return nil
}

// decodeFile decodes the one object of a YAML file strictly into v.
func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", filepath.ToSlash(path), err)
	}
}

// byName returns the object of objs named name, or nil. A generated
// ConfigMap's name carries a hash suffix: configMap matches its prefix.
func byName[T interface{ GetName() string }](objs []T, name string) T {
	for _, o := range objs {
		if o.GetName() == name {
			return o
		}
	}
	var zero T
	return zero
}
