package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/state"
)

// kubeStatePrefix marks a --state-dir kept in a management cluster: kube://NAMESPACE/NAME, the
// state of the KforgeCluster NAME (kforge controller), read and written through $KUBECONFIG.
const kubeStatePrefix = "kube://"

// clusterState is the state dir a command works in: a directory on this workstation, or with
// --state-dir kube://NAMESPACE/NAME a private copy of the state kept in a management cluster
// (kube.StateStore), written back after each step and when the command ends.
type clusterState struct {
	state.Dir
	store  *kube.StateStore // nil for a directory
	unlock func()
	// logs is where the debug log goes: the state dir's, or for a state kept in a management
	// cluster the default state dir's on this workstation (the copy is removed at the end).
	logs string
}

// openState takes the state dir of cluster inv for one command; lock holds it, against
// another run, until close (the commands that change a cluster).
func openState(ctx context.Context, g *Globals, inv *inventory.Cluster, lock bool) (*clusterState, error) {
	if ns, name, ok, err := kubeState(g.StateDir); err != nil {
		return nil, usageError{err}
	} else if ok {
		local, err := state.Default(inv.Name)
		if err != nil {
			return nil, err
		}
		k, err := managementClient()
		if err != nil {
			return nil, err
		}
		host, _ := os.Hostname()
		store, err := kube.OpenState(ctx, k, ns, name, kube.StateOptions{Identity: fmt.Sprintf("kforge on %s (pid %d)", host, os.Getpid()), Lock: lock})
		if err != nil {
			return nil, err
		}
		return &clusterState{Dir: state.At(store.Dir()), store: store, unlock: func() {}, logs: local.Logs()}, nil
	}
	d := state.At(g.StateDir)
	if g.StateDir == "" {
		var err error
		if d, err = state.Default(inv.Name); err != nil {
			return nil, err
		}
	}
	s := &clusterState{Dir: d, unlock: func() {}, logs: d.Logs()}
	if lock {
		unlock, err := d.Lock()
		if err != nil {
			return nil, err
		}
		s.unlock = unlock
	}
	return s, nil
}

// kubeState parses --state-dir kube://NAMESPACE/NAME; ok is false for a directory.
func kubeState(dir string) (ns, name string, ok bool, err error) {
	rest, ok := strings.CutPrefix(dir, kubeStatePrefix)
	if !ok {
		return "", "", false, nil
	}
	ns, name, _ = strings.Cut(rest, "/")
	if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(name)) > 0 {
		return "", "", false, fmt.Errorf("--state-dir %s: want kube://NAMESPACE/NAME, the namespace and name of the cluster's KforgeCluster in the management cluster ($KUBECONFIG)", dir)
	}
	return ns, name, true, nil
}

// managementClient is a client of the management cluster: $KUBECONFIG or ~/.kube/config, as
// kubectl finds it.
func managementClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--state-dir %s...: the management cluster's kubeconfig: %w", kubeStatePrefix, err)
	}
	return kubernetes.NewForConfig(cfg)
}

// close ends the command's hold: a state kept in a management cluster is written back and its
// copy removed.
func (s *clusterState) close(ctx context.Context) error {
	s.unlock()
	if s.store == nil {
		return nil
	}
	return s.store.Close(context.WithoutCancel(ctx))
}
