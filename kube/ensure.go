package kube

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// Action is what happened to one object.
type Action string

const (
	Created   Action = "created"
	Updated   Action = "updated"
	Unchanged Action = "unchanged"
	Deleted   Action = "deleted" // an addon turned off in the inventory
)

// Change records what one function did to one object.
type Change struct {
	Kind      string `json:"kind"`                // e.g. ConfigMap, ClusterRoleBinding
	Namespace string `json:"namespace,omitempty"` // empty for cluster-scoped objects
	Name      string `json:"name"`
	Action    Action `json:"action"`
}

func (c Change) String() string {
	n := c.Name
	if c.Namespace != "" {
		n = c.Namespace + "/" + c.Name
	}
	return fmt.Sprintf("%s %s %s", c.Kind, n, c.Action)
}

// Changed reports whether any of the changes created, updated or deleted an object.
func Changed(cs []Change) bool {
	for _, c := range cs {
		if c.Action != Unchanged {
			return true
		}
	}
	return false
}

// Summary counts changes by action for a status line: "3 created, 1 updated, 36 unchanged"
// (actions with no change left out; "nothing" for none).
func Summary(cs []Change) string {
	n := map[Action]int{}
	for _, c := range cs {
		n[c.Action]++
	}
	var parts []string
	for _, a := range []Action{Created, Updated, Deleted, Unchanged} {
		if n[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[a], a))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

type object interface {
	metav1.Object
	runtime.Object
}

// typedClient is the subset of a generated typed client (e.g. CoreV1().ConfigMaps(ns)) that
// ensure needs.
type typedClient[T object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// ensure makes the object want exist: it creates it when missing, leaves it alone when every
// field want sets already has want's value (fields want leaves empty, such as those the API
// server defaults, are not compared; extra labels and annotations others added are fine), and
// otherwise updates it to want, keeping the labels and annotations others added. It never fails
// on "already exists" and retries on write conflicts.
func ensure[T object](ctx context.Context, c typedClient[T], kind string, want T) (Change, error) {
	ch := Change{Kind: kind, Namespace: want.GetNamespace(), Name: want.GetName()}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = c.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Created by someone else since the Get: compare again.
				return apierrors.NewConflict(schema.GroupResource{Resource: kind}, want.GetName(), err)
			}
			ch.Action = Created
			return err
		}
		if err != nil {
			return err
		}
		if sameObject(want, have) {
			ch.Action = Unchanged
			return nil
		}
		upd := want.DeepCopyObject().(T)
		merged := mergeMeta(want, have)
		reflect.ValueOf(upd).Elem().FieldByName("ObjectMeta").Set(reflect.ValueOf(merged))
		keepData(upd, have)
		_, err = c.Update(ctx, upd, metav1.UpdateOptions{})
		ch.Action = Updated
		return err
	})
	if err != nil {
		return ch, fmt.Errorf("ensure %s: %w", objName(ch), err)
	}
	return ch, nil
}

// ensureRetain creates want when missing and otherwise leaves whatever exists alone
// (kubeadm's CreateOrRetain).
func ensureRetain[T object](ctx context.Context, c typedClient[T], kind string, want T) (Change, error) {
	ch := Change{Kind: kind, Namespace: want.GetNamespace(), Name: want.GetName(), Action: Unchanged}
	_, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		ch.Action = Created
		if apierrors.IsAlreadyExists(err) {
			ch.Action, err = Unchanged, nil
		}
	}
	if err != nil {
		return ch, fmt.Errorf("ensure %s: %w", objName(ch), err)
	}
	return ch, nil
}

func objName(c Change) string {
	if c.Namespace != "" {
		return c.Kind + " " + c.Namespace + "/" + c.Name
	}
	return c.Kind + " " + c.Name
}

// sameObject reports whether have already carries everything want sets: want's labels and
// annotations, and every non-empty field outside metadata and status.
func sameObject(want, have object) bool {
	if !subset(want.GetLabels(), have.GetLabels()) || !subset(want.GetAnnotations(), have.GetAnnotations()) {
		return false
	}
	if ws, ok := want.(*corev1.Secret); ok {
		// A Secret's data is compared whole: a key left over (an old token's expiration)
		// would change what the Secret means.
		if hs := have.(*corev1.Secret); len(ws.Data) != len(hs.Data) {
			return false
		}
	}
	w, h := reflect.ValueOf(want).Elem(), reflect.ValueOf(have).Elem()
	for i := range w.NumField() {
		switch w.Type().Field(i).Name {
		case "TypeMeta", "ObjectMeta", "Status":
			continue
		}
		if !equality.Semantic.DeepDerivative(w.Field(i).Interface(), h.Field(i).Interface()) || !sameLengths(w.Field(i), h.Field(i)) {
			return false
		}
	}
	return true
}

// sameLengths says whether every non-empty slice want sets is as long as have's. DeepDerivative
// takes a shorter slice of want's for a prefix of have's, and an element kforge no longer
// sets (an argument, an RBAC rule) would then stay for good.
func sameLengths(w, h reflect.Value) bool {
	switch w.Kind() {
	case reflect.Pointer, reflect.Interface:
		if w.IsNil() || h.IsNil() || w.Elem().Type() != h.Elem().Type() {
			return true
		}
		return sameLengths(w.Elem(), h.Elem())
	case reflect.Struct:
		for i := range w.NumField() {
			if w.Type().Field(i).IsExported() && !sameLengths(w.Field(i), h.Field(i)) {
				return false
			}
		}
	case reflect.Slice:
		if w.Len() == 0 {
			return true
		}
		if w.Len() != h.Len() {
			return false
		}
		for i := range w.Len() {
			if !sameLengths(w.Index(i), h.Index(i)) {
				return false
			}
		}
	case reflect.Map:
		for _, k := range w.MapKeys() {
			if hv := h.MapIndex(k); hv.IsValid() && !sameLengths(w.MapIndex(k), hv) {
				return false
			}
		}
	}
	return true
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// mergeMeta is have's metadata (resourceVersion, uid, others' labels and annotations) with
// want's labels and annotations laid over it.
func mergeMeta(want, have object) metav1.ObjectMeta {
	m := *reflect.ValueOf(have).Elem().FieldByName("ObjectMeta").Addr().Interface().(*metav1.ObjectMeta)
	m = *m.DeepCopy()
	m.Labels = overlay(m.Labels, want.GetLabels())
	m.Annotations = overlay(m.Annotations, want.GetAnnotations())
	return m
}

func overlay(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, over)
	return out
}

// keepData keeps the keys of a ConfigMap that others added (the bootstrap signer's
// jws-kubeconfig-* signatures in cluster-info, for one): kforge owns only the keys it writes.
func keepData(upd, have runtime.Object) {
	u, ok := upd.(*corev1.ConfigMap)
	if !ok {
		return
	}
	h := have.(*corev1.ConfigMap)
	for k, v := range h.Data {
		if _, ours := u.Data[k]; !ours {
			if u.Data == nil {
				u.Data = map[string]string{}
			}
			u.Data[k] = v
		}
	}
}
