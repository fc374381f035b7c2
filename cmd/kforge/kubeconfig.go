package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kforge/kforge/internal/fsx"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigCmd prints the cluster's admin kubeconfig, or merges it into the user's.
type KubeconfigCmd struct {
	Merge bool `help:"Merge into ~/.kube/config (or the first file of $KUBECONFIG) and make it the current context, instead of printing it."`
}

func (c *KubeconfigCmd) Run(s *streams, g *Globals, dl *debugLog) error {
	inv, state, err := loadCluster(g)
	if err != nil {
		return err
	}
	dl.UseDir(state.Logs())
	path := state.AdminKubeconfig()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no admin kubeconfig at %s: run kforge apply first", path)
	} else if err != nil {
		return err
	}
	if !c.Merge {
		_, err = s.Out.Write(data)
		return err
	}
	target := clientcmd.RecommendedHomeFile
	if env := filepath.SplitList(os.Getenv(clientcmd.RecommendedConfigPathEnvVar)); len(env) > 0 && env[0] != "" {
		target = env[0]
	}
	merged, err := mergeKubeconfig(target, data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	if err := fsx.WriteFile(target, merged, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "merged cluster %s into %s and made it the current context\n", inv.Name, target)
	return nil
}

// mergeKubeconfig adds the clusters, users and contexts of add to the kubeconfig at target
// (replacing entries of the same name) and makes add's context current.
func mergeKubeconfig(target string, add []byte) ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(target)
	if errors.Is(err, os.ErrNotExist) {
		cfg = clientcmdapi.NewConfig()
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", target, err)
	}
	in, err := clientcmd.Load(add)
	if err != nil {
		return nil, err
	}
	for k, v := range in.Clusters {
		cfg.Clusters[k] = v
	}
	for k, v := range in.AuthInfos {
		cfg.AuthInfos[k] = v
	}
	for k, v := range in.Contexts {
		cfg.Contexts[k] = v
	}
	cfg.CurrentContext = in.CurrentContext
	return clientcmd.Write(*cfg)
}
