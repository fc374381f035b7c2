package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager kforge applies as.
const FieldManager = "kforge"

// Manifest is one user manifest file: YAML or JSON, possibly several documents.
type Manifest struct {
	Path string // named in errors
	Data []byte
}

// NewRESTMapper is a discovery-based RESTMapper that can be reset to learn kinds added since
// (a CustomResourceDefinition applied earlier in the same run).
func NewRESTMapper(d discovery.DiscoveryInterface) meta.ResettableRESTMapper {
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d))
}

// ApplyInput tunes ApplyManifests.
type ApplyInput struct {
	Manifests []Manifest
	// KindWait bounds how long a document whose kind is unknown waits for it to appear (a CRD
	// applied just before it being established); default 30 s.
	KindWait time.Duration
}

// ApplyManifests applies every object of every manifest, in order, with server-side apply
// (field manager "kforge", conflicts forced: kforge's inventory is the source of truth for
// what it applies). Objects without a namespace that need one go to "default". An object the
// server already holds as applied is reported Unchanged (its resourceVersion did not move).
func ApplyManifests(ctx context.Context, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, in ApplyInput) ([]Change, error) {
	if in.KindWait <= 0 {
		in.KindWait = 30 * time.Second
	}
	var out []Change
	for _, m := range in.Manifests {
		objs, err := DecodeManifest(m)
		if err != nil {
			return out, err
		}
		for i, u := range objs {
			ch, err := applyObject(ctx, dyn, mapper, u, in.KindWait)
			if err != nil {
				return out, fmt.Errorf("%s: document %d (%s %s): %w", m.Path, i+1, u.GetKind(), u.GetName(), err)
			}
			out = append(out, ch)
		}
	}
	return out, nil
}

// DecodeManifest splits a manifest into its objects, skipping empty documents and expanding
// kind: List.
func DecodeManifest(m Manifest) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m.Data), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", m.Path, doc, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", m.Path, doc, err)
			}
			for i := range l.Items {
				out = append(out, &l.Items[i])
			}
			continue
		}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: document %d: every object needs apiVersion, kind and metadata.name", m.Path, doc)
		}
		out = append(out, u)
	}
}

func applyObject(ctx context.Context, dyn dynamic.Interface, mapper meta.ResettableRESTMapper, u *unstructured.Unstructured, kindWait time.Duration) (Change, error) {
	gvk := u.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		deadline := time.Now().Add(kindWait)
		for meta.IsNoMatchError(err) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return Change{}, context.Cause(ctx)
			case <-time.After(500 * time.Millisecond):
			}
			mapper.Reset()
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
	}
	if err != nil {
		return Change{}, fmt.Errorf("the API server does not serve %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
	ch := Change{Kind: u.GetKind(), Name: u.GetName()}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if u.GetNamespace() == "" {
			u.SetNamespace(metav1.NamespaceDefault)
		}
		ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		ch.Namespace = u.GetNamespace()
	} else {
		u.SetNamespace("")
	}
	before := ""
	have, err := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ch, err
	default:
		before = have.GetResourceVersion()
	}
	if before != "" && onlyIdentity(u) {
		// Nothing to apply: the object sets no field beyond its name. The API server would
		// record an empty field set for kforge, drop it, and on the next apply hand the
		// server-set fields (a Namespace's finalizers and name label) to "before-first-apply"
		// with a write. Existing is all such a manifest asks for.
		ch.Action = Unchanged
		return ch, nil
	}
	data, err := u.MarshalJSON()
	if err != nil {
		return ch, err
	}
	got, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: FieldManager, Force: new(true)})
	if err != nil {
		return ch, err
	}
	switch {
	case before == "":
		ch.Action = Created
	case got.GetResourceVersion() == before && sameStored(got, have):
		// A dry run (kforge plan) answers with the resourceVersion it had: only the
		// content tells whether the apply would change the object.
		ch.Action = Unchanged
	default:
		ch.Action = Updated
	}
	return ch, nil
}

// sameStored reports whether two versions of an object hold the same content, apart from what
// the API server maintains on every write (resourceVersion, generation, managedFields' times).
func sameStored(a, b *unstructured.Unstructured) bool {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		c.SetResourceVersion("")
		c.SetGeneration(0)
		mf := c.GetManagedFields()
		for i := range mf {
			mf[i].Time = nil
		}
		c.SetManagedFields(mf)
		return c.Object
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// onlyIdentity reports whether u sets nothing but apiVersion, kind, metadata.name and
// metadata.namespace.
func onlyIdentity(u *unstructured.Unstructured) bool {
	for k, v := range u.Object {
		switch k {
		case "apiVersion", "kind":
		case "metadata":
			m, ok := v.(map[string]any)
			if !ok {
				return false
			}
			for mk := range m {
				if mk != "name" && mk != "namespace" {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}
