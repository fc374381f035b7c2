package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/inventory"
)

// Workspace is a KforgeCluster as a run reads it: its spec written as kforge.yaml in a
// directory of its own, each key of each credentialsFrom Secret a file beside it (ssh's
// identityFile: id_ed25519) and a variable of its environment (sudoPasswordEnv, registry
// credentials, ${VAR} in the spec). The controller makes one per run; so does the CLI given
// -i kube://NAMESPACE/NAME.
type Workspace struct {
	Dir       string // kforge.yaml and the credentials' files
	Inventory string // Dir/kforge.yaml
	env       map[string]string
	// fallback reads what the credentials do not hold (the CLI's own environment); nil in the
	// controller.
	fallback func(string) (string, bool)
}

// NewWorkspace makes k's workspace in a new directory in dir ("": the temporary directory).
// A missing Secret or a spec with a field of the object's own is an InvalidSpecError.
func NewWorkspace(ctx context.Context, client kubernetes.Interface, k *KforgeCluster, dir string) (*Workspace, error) {
	env := map[string]string{}
	files := map[string][]byte{}
	for _, ref := range k.Spec.CredentialsFrom {
		sec, err := client.CoreV1().Secrets(k.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, &InvalidSpecError{fmt.Errorf("KforgeCluster %s/%s: spec.credentialsFrom: Secret %s/%s not found: create it", k.Namespace, k.Name, k.Namespace, ref.Name)}
		} else if err != nil {
			return nil, err
		}
		for key, v := range sec.Data {
			env[key], files[key] = string(v), v
		}
	}
	inv, err := k.InventoryYAML()
	if err != nil {
		return nil, &InvalidSpecError{err}
	}
	w := &Workspace{env: env}
	if w.Dir, err = os.MkdirTemp(dir, "kforge-inventory-"); err != nil {
		return nil, err
	}
	for name, data := range files {
		if !filepath.IsLocal(name) {
			continue // a Secret key is a file name; never a path
		}
		if err := fsx.WriteFile(filepath.Join(w.Dir, name), data, 0o600); err != nil {
			w.Close()
			return nil, err
		}
	}
	w.Inventory = filepath.Join(w.Dir, "kforge.yaml")
	if err := fsx.WriteFile(w.Inventory, inv, 0o600); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Load loads the workspace's inventory with its environment; one the inventory package refuses
// is an InvalidSpecError naming the object.
func (w *Workspace) Load(k *KforgeCluster) (*inventory.Cluster, error) {
	c, err := inventory.LoadEnv(w.Inventory, w.Lookup)
	if es, ok := err.(inventory.Errors); ok {
		return nil, &InvalidSpecError{fmt.Errorf("KforgeCluster %s/%s: %w", k.Namespace, k.Name, es)}
	}
	return c, err
}

// SetHome makes home the run's HOME, where ssh's known_hosts is (~/.ssh/known_hosts unless the
// spec names another): a directory in the cluster's state, so that host keys are kept with it.
func (w *Workspace) SetHome(home string) { w.env["HOME"] = home }

// Fallback makes lookup read what the credentials do not hold: a person taking a cluster over
// with the CLI gives their own environment (KFORGE_BUNDLE for a spec's
// bundle: ${KFORGE_BUNDLE:-/bundle}, SSH_AUTH_SOCK).
func (w *Workspace) Fallback(lookup func(string) (string, bool)) { w.fallback = lookup }

// Lookup and Getenv read the workspace's environment: the credentials, then the fallback.
func (w *Workspace) Lookup(key string) (string, bool) {
	if v, ok := w.env[key]; ok {
		return v, ok
	}
	if w.fallback != nil {
		return w.fallback(key)
	}
	return "", false
}

func (w *Workspace) Getenv(key string) string { v, _ := w.Lookup(key); return v }

// Close removes the workspace's files.
func (w *Workspace) Close() error { return os.RemoveAll(w.Dir) }

// InvalidSpecError is a spec the inventory package refuses, or a credentials Secret that is
// missing: the controller tries nothing until the object or its Secrets change.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return e.Err.Error() }
func (e *InvalidSpecError) Unwrap() error { return e.Err }

// Get reads KforgeCluster ns/name through cfg's cluster.
func Get(ctx context.Context, cfg *rest.Config, ns, name string) (*KforgeCluster, error) {
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	u, err := d.Resource(GroupVersion.WithResource(Resource)).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("KforgeCluster %s/%s: %w", ns, name, err)
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var k KforgeCluster
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("KforgeCluster %s/%s: %w", ns, name, err)
	}
	return &k, nil
}
