package k8s

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScaledObject mirrors KEDA's keda.sh/v1alpha1 ScaledObject, every field
// of its spec with the same JSON names, so that strict decoding refuses
// what KEDA would not take. Source: github.com/kedacore/keda/v2 v2.21.0,
// apis/keda/v1alpha1/scaledobject_types.go and scaletriggers_types.go.
// KEDA's own module is not imported: its API package pulls in
// controller-runtime and client-go, twice the packages this test builds
// otherwise. Status is left out: manifests do not carry it.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is KEDA's ScaledObjectSpec.
type ScaledObjectSpec struct {
	ScaleTargetRef        *ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval       *int32          `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32          `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32          `json:"maxReplicaCount,omitempty"`
	Advanced              *AdvancedConfig `json:"advanced,omitempty"`
	Triggers              []ScaleTriggers `json:"triggers"`
	Fallback              *Fallback       `json:"fallback,omitempty"`
}

// Fallback is KEDA's Fallback.
type Fallback struct {
	FailureThreshold int32  `json:"failureThreshold"`
	Replicas         int32  `json:"replicas"`
	Behavior         string `json:"behavior,omitempty"`
}

// AdvancedConfig is KEDA's AdvancedConfig.
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                           `json:"restoreToOriginalReplicaCount,omitempty"`
	ScalingModifiers              ScalingModifiers               `json:"scalingModifiers,omitempty"`
}

// ScalingModifiers is KEDA's ScalingModifiers.
type ScalingModifiers struct {
	Formula          string                         `json:"formula,omitempty"`
	Target           string                         `json:"target,omitempty"`
	ActivationTarget string                         `json:"activationTarget,omitempty"`
	MetricType       autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

// HorizontalPodAutoscalerConfig is KEDA's HorizontalPodAutoscalerConfig.
type HorizontalPodAutoscalerConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
	Name     string                                         `json:"name,omitempty"`
}

// ScaleTarget is KEDA's ScaleTarget.
type ScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

// ScaleTriggers is KEDA's ScaleTriggers.
type ScaleTriggers struct {
	Type              string                         `json:"type"`
	Name              string                         `json:"name,omitempty"`
	UseCachedMetrics  bool                           `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string              `json:"metadata"`
	AuthenticationRef *AuthenticationRef             `json:"authenticationRef,omitempty"`
	MetricType        autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

// AuthenticationRef is KEDA's AuthenticationRef.
type AuthenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// GetName returns the object's name.
func (so *ScaledObject) GetName() string { return so.Name }

// natsJetStreamMetadata are the trigger metadata keys of KEDA's
// nats-jetstream scaler, true for those it requires (in trigger metadata
// or a TriggerAuthentication). Source: github.com/kedacore/keda/v2
// v2.21.0, pkg/scalers/nats_jetstream_scaler.go, the keda:"name=..." tags
// of natsJetStreamMetadata.
var natsJetStreamMetadata = map[string]bool{
	"account": false, "accountID": false, "stream": true, "consumer": true,
	"lagThreshold": false, "activationLagThreshold": false, "useHttps": false,
	"natsServerMonitoringEndpoint": true,
}
