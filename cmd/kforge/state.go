package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/controller"
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
	// inventoryDir resolves the inventory's relative paths; getenv reads the variables it
	// names (nil: the process's). With -i kube://…, both are ws's.
	inventoryDir string
	getenv       func(string) string
	ws           *controller.Workspace
	// logs is where the debug log goes: the state dir's, or for a state kept in a management
	// cluster the default state dir's on this workstation (the copy is removed at the end).
	logs string
}

// openState takes the state dir of cluster inv for one command; lock holds it, against
// another run, until close (the commands that change a cluster).
func openState(ctx context.Context, g *Globals, inv *inventory.Cluster, lock bool) (*clusterState, error) {
	if ns, name, ok, err := kubeRef("--state-dir", g.StateDir); err != nil {
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

// kubeRef parses flag's value kube://NAMESPACE/NAME; ok is false for a path.
func kubeRef(flag, value string) (ns, name string, ok bool, err error) {
	rest, ok := strings.CutPrefix(value, kubeStatePrefix)
	if !ok {
		return "", "", false, nil
	}
	ns, name, _ = strings.Cut(rest, "/")
	if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(name)) > 0 {
		return "", "", false, fmt.Errorf("%s %s: want kube://NAMESPACE/NAME, the namespace and name of the cluster's KforgeCluster in the management cluster ($KUBECONFIG)", flag, value)
	}
	return ns, name, true, nil
}

// managementConfig is the management cluster's client configuration: $KUBECONFIG or
// ~/.kube/config, as kubectl finds it.
func managementConfig() (*rest.Config, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%s...: the management cluster's kubeconfig: %w", kubeStatePrefix, err)
	}
	return cfg, nil
}

func managementClient() (kubernetes.Interface, error) {
	cfg, err := managementConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// objectInventory is the inventory of KforgeCluster ns/name: its spec and credentials, in a
// workspace removed when the command ends (controller.NewWorkspace), with the state dir, when
// --state-dir is not given, the object's state in the management cluster; ssh's known_hosts is
// then the one the controller keeps there.
func objectInventory(ctx context.Context, g *Globals, ns, name string, lock bool) (*inventory.Cluster, *clusterState, error) {
	cfg, err := managementConfig()
	if err != nil {
		return nil, nil, err
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	obj, err := controller.Get(ctx, cfg, ns, name)
	if err != nil {
		return nil, nil, err
	}
	ws, err := controller.NewWorkspace(ctx, k, obj, "")
	if err != nil {
		return nil, nil, invalidSpec(err)
	}
	ws.Fallback(os.LookupEnv) // what the Secrets do not hold: this person's environment
	inv, err := ws.Load(obj)
	if err != nil {
		return nil, nil, errors.Join(invalidSpec(err), ws.Close())
	}
	if g.StateDir == "" {
		g.StateDir = kubeStatePrefix + ns + "/" + name
	}
	d, err := openState(ctx, g, inv, lock)
	if err != nil {
		return nil, nil, errors.Join(err, ws.Close())
	}
	d.ws, d.inventoryDir, d.getenv = ws, ws.Dir, ws.Getenv
	if d.store != nil {
		ws.SetHome(filepath.Join(d.store.Dir(), "home"))
	}
	return inv, d, nil
}

// invalidSpec is a KforgeCluster the inventory package refuses: bad input, nothing changed.
func invalidSpec(err error) error {
	if errors.As(err, new(*controller.InvalidSpecError)) {
		return usageError{err}
	}
	return err
}

// close ends the command's hold: a state kept in a management cluster is written back and its
// copy removed.
func (s *clusterState) close(ctx context.Context) error {
	s.unlock()
	var err error
	if s.ws != nil {
		err = s.ws.Close()
	}
	if s.store == nil {
		return err
	}
	return errors.Join(err, s.store.Close(context.WithoutCancel(ctx)))
}
