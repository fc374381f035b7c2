package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/tasks"
	"github.com/kforge/kforge/templates"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigCmd prints the cluster's admin kubeconfig, or merges it into the user's; with
// --user it signs a kubeconfig for a person or a CI job instead.
type KubeconfigCmd struct {
	Merge bool     `help:"Merge into ~/.kube/config (or the first file of $KUBECONFIG) and make it the current context, instead of printing it."`
	User  string   `placeholder:"NAME" help:"Sign a kubeconfig for this user (a person or a CI job) with the cluster CA, instead of the admin's; kforge records who, which groups and until when (kforge certs check lists them)."`
	Group []string `placeholder:"GROUP" help:"With --user: a group the user is in (repeat for more); bind RBAC roles to it."`
	TTL   string   `name:"ttl" placeholder:"DURATION" help:"With --user: how long the kubeconfig is valid, such as 8h or 30d (default: the inventory's pki.certValidity)."`
}

func (c *KubeconfigCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	if c.User == "" && (len(c.Group) > 0 || c.TTL != "") {
		return usageError{errors.New("--group and --ttl go with --user NAME")}
	}
	var ttl time.Duration
	if c.TTL != "" {
		d, err := inventory.ParseDuration(c.TTL)
		if err != nil {
			return usageError{fmt.Errorf("--ttl: %v", err)}
		}
		ttl = time.Duration(d)
	}
	inv, held, err := loadCluster(ctx, g, c.User != "")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := held.close(ctx); err == nil {
			err = cerr
		}
	}()
	state := held.Dir
	dl.UseDir(held.logs)
	if c.User != "" {
		return c.issue(ctx, s, g, log, inv, held, ttl)
	}
	path := state.AdminKubeconfig()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no admin kubeconfig at %s: run kforge apply first", path)
	} else if err != nil {
		return err
	}
	if more := templates.AdminContexts(inv); len(more) > 0 {
		// The workstation has no address that survives any master without a load balancer
		// or a virtual IP: say so, and how to reach another master.
		fmt.Fprintf(s.Err, "kforge: %s has no controlPlaneEndpoint or controlPlaneVIP: the current context reaches the first master, %s; when it is down, use another master's context: %s (kubectl --context NAME), or give the inventory a controlPlaneVIP\n",
			inv.Name, inv.Masters[0].Name, strings.Join(more, ", "))
	}
	if !c.Merge {
		_, err = s.Out.Write(data)
		return err
	}
	return mergeInto(s, data, "cluster "+inv.Name)
}

// mergeInto merges kubeconfig data into ~/.kube/config (or the first file of $KUBECONFIG) and
// makes its context the current one.
func mergeInto(s *streams, data []byte, what string) error {
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
	fmt.Fprintf(s.Err, "merged %s into %s and made it the current context\n", what, target)
	return nil
}

// issue signs a user's kubeconfig and writes it where the admin's would go; the state dir is
// held (loadCluster's lock) while the serial is recorded.
func (c *KubeconfigCmd) issue(ctx context.Context, s *streams, g *Globals, log *slog.Logger, inv *inventory.Cluster, d *clusterState, ttl time.Duration) error {
	if ttl == 0 {
		ttl = time.Duration(inv.PKI.CertValidity)
	}
	u, err := tasks.IssueUserKubeconfig(ctx, inv, taskOptions(d, g, log), c.User, c.Group, ttl)
	if err != nil {
		return usageError{err}
	}
	groups := "no groups"
	if len(u.Record.Groups) > 0 {
		groups = "groups " + strings.Join(u.Record.Groups, ", ")
	}
	fmt.Fprintf(s.Err, "signed a kubeconfig for user %s (%s), valid until %s, serial %s; recorded in %s\n", c.User, groups, u.Record.NotAfter.Format(time.RFC3339), u.Record.Serial, d.IssuedRecord())
	if !c.Merge {
		_, err = s.Out.Write(u.Kubeconfig)
		return err
	}
	return mergeInto(s, u.Kubeconfig, "user "+c.User+" of cluster "+inv.Name)
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
