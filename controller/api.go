// Package controller is `kforge controller`: KforgeCluster objects in a management cluster,
// each reconciled with the CLI's own step lists (plan, then apply when the plan is not empty),
// its state kept in the management cluster (kube.StateStore), built on controller-runtime.
package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/inventory"
)

// The KforgeCluster resource: group and version are the inventory's (kforge.dev/v1alpha1).
const (
	Group    = "kforge.dev"
	Version  = "v1alpha1"
	Kind     = "KforgeCluster"
	Resource = "kforgeclusters"
	// PausedAnnotation set to "true" stops reconciling one cluster.
	PausedAnnotation = "kforge.dev/paused"
	// Finalizer holds a KforgeCluster whose deletionPolicy is Reset until its hosts are reset.
	Finalizer = "kforge.dev/reset"
)

// What deleting a KforgeCluster does to its hosts (Spec.DeletionPolicy).
const (
	DeletionRetain = "Retain" // the hosts are left alone (the default)
	DeletionReset  = "Reset"  // the hosts are reset first, as by kforge reset
)

// GroupVersion is kforge.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AddToScheme registers KforgeCluster and its list.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &KforgeCluster{}, &KforgeClusterList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// KforgeCluster is one cluster kforge controller makes and keeps: its spec is the inventory.
type KforgeCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// KforgeClusterList is a list of KforgeClusters.
type KforgeClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KforgeCluster `json:"items"`
}

// Spec is the inventory (kforge.yaml without apiVersion, kind and name: the object's own),
// plus what only the controller needs: where its credentials are and what deleting it does.
// The inventory's fields are kept as written and read by the inventory package, with the
// same validation and errors as the CLI's.
type Spec struct {
	// Inventory is every inventory field, as JSON.
	Inventory json.RawMessage `json:"-"`
	// CredentialsFrom are Secrets in the object's namespace whose keys the inventory refers
	// to: each key is a file beside the inventory (ssh.identityFile: id_ed25519) and an
	// environment variable (ssh.sudoPasswordEnv: SUDO_PASSWORD).
	CredentialsFrom []SecretRef `json:"credentialsFrom,omitempty"`
	// DeletionPolicy: Retain (the default) leaves the hosts as they are when the object is
	// deleted; Reset resets them first (kforge reset).
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// Prune removes the hosts that left the inventory (apply --prune); without it such an
	// apply stops, naming them.
	Prune bool `json:"prune,omitempty"`
	// AcceptNewHostKeys trusts a host whose SSH key is not yet known and records it in the
	// cluster's state (apply --accept-new-host-keys), unless the inventory pins it (hostKey).
	AcceptNewHostKeys bool `json:"acceptNewHostKeys,omitempty"`
}

// SecretRef names a Secret in the KforgeCluster's namespace.
type SecretRef struct {
	Name string `json:"name"`
}

// controllerFields are Spec's own fields; every other is the inventory's.
var controllerFields = []string{"credentialsFrom", "deletionPolicy", "prune", "acceptNewHostKeys"}

// inventoryHead are the inventory fields the object itself gives: not in spec.
var inventoryHead = []string{"apiVersion", "kind", "name"}

func (s Spec) MarshalJSON() ([]byte, error) {
	fields := map[string]json.RawMessage{}
	if len(s.Inventory) > 0 {
		if err := json.Unmarshal(s.Inventory, &fields); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	type own Spec
	b, err := json.Marshal(own(s))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	return json.Marshal(fields)
}

func (s *Spec) UnmarshalJSON(b []byte) error {
	type own Spec
	var o own
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	for _, f := range controllerFields {
		delete(fields, f)
	}
	inv, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	*s = Spec(o)
	s.Inventory = inv
	return nil
}

// InventoryYAML is the object as a kforge.yaml: apiVersion, kind and name, then the spec's
// inventory fields.
func (k *KforgeCluster) InventoryYAML() ([]byte, error) {
	fields := map[string]any{}
	if len(k.Spec.Inventory) > 0 {
		if err := json.Unmarshal(k.Spec.Inventory, &fields); err != nil {
			return nil, fmt.Errorf("%s/%s: spec: %w", k.Namespace, k.Name, err)
		}
	}
	for _, f := range inventoryHead {
		if _, ok := fields[f]; ok {
			return nil, fmt.Errorf("KforgeCluster %s/%s: spec.%s is the object's own (the cluster's name is metadata.name): remove it from spec", k.Namespace, k.Name, f)
		}
	}
	var buf bytes.Buffer
	head, err := yaml.Marshal(map[string]string{"apiVersion": inventory.APIVersion, "kind": inventory.Kind})
	if err != nil {
		return nil, err
	}
	buf.Write(head)
	fmt.Fprintf(&buf, "name: %s\n", k.Name)
	if len(fields) > 0 {
		b, err := yaml.Marshal(fields)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Status is what the controller last saw and did, after Kubernetes API conventions.
type Status struct {
	// ObservedGeneration is the spec's generation the status speaks of.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready (the cluster is as its spec says), Progressing (a run is changing
	// it), Degraded (the last run failed, or the spec is invalid).
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Version is the Kubernetes version the cluster runs after the last apply.
	Version string `json:"version,omitempty"`
	// Nodes is how many nodes the inventory has, once applied.
	Nodes int `json:"nodes,omitempty"`
	// LastPlan is the last plan's summary ("No changes", or what apply would change).
	LastPlan string `json:"lastPlan,omitempty"`
	// LastRun is the last run: its command, when it started and ended, and its outcome
	// ("ok", or the error, redacted).
	LastRun *RunStatus `json:"lastRun,omitempty"`
}

// RunStatus is one run of a command on the cluster.
type RunStatus struct {
	Command string       `json:"command"`
	Start   metav1.Time  `json:"start"`
	End     *metav1.Time `json:"end,omitempty"`
	Outcome string       `json:"outcome,omitempty"`
}

// The condition types and the reasons the controller gives.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
)

// DeepCopyObject, DeepCopy and DeepCopyInto are written out (no code generator): the spec's
// inventory is JSON bytes, copied as such.
func (k *KforgeCluster) DeepCopyObject() runtime.Object { return k.DeepCopy() }

func (k *KforgeCluster) DeepCopy() *KforgeCluster {
	if k == nil {
		return nil
	}
	out := new(KforgeCluster)
	k.DeepCopyInto(out)
	return out
}

func (k *KforgeCluster) DeepCopyInto(out *KforgeCluster) {
	*out = *k
	k.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Inventory = bytes.Clone(k.Spec.Inventory)
	out.Spec.CredentialsFrom = slices.Clone(k.Spec.CredentialsFrom)
	out.Status.Conditions = nil
	for _, c := range k.Status.Conditions {
		var cc metav1.Condition
		c.DeepCopyInto(&cc)
		out.Status.Conditions = append(out.Status.Conditions, cc)
	}
	if k.Status.LastRun != nil {
		r := *k.Status.LastRun
		if r.End != nil {
			e := *r.End
			r.End = &e
		}
		out.Status.LastRun = &r
	}
}

func (l *KforgeClusterList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &KforgeClusterList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopy())
	}
	return out
}
