package kube

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// removal is one object of an addon the inventory turned off, and how to delete it.
type removal struct {
	kind, namespace, name string
	delete                func() error
}

// removeAll deletes each object in order; each that was there is a Deleted change, one already
// gone is none. It stops at the first other error.
func removeAll(rs []removal) ([]Change, error) {
	var out []Change
	for _, r := range rs {
		switch err := r.delete(); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return out, fmt.Errorf("delete %s %s: %w", r.kind, r.name, err)
		default:
			out = append(out, Change{Kind: r.kind, Namespace: r.namespace, Name: r.name, Action: Deleted})
		}
	}
	return out, nil
}
