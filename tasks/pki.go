package tasks

import (
	"context"
	"fmt"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/state"
)

// bootstrapTokenTTL is how long a bootstrap token lives (kubeadm's default); kforge renews it
// on a run when less than half of it is left.
const bootstrapTokenTTL = 24 * time.Hour

// ensurePKI generates or reuses the certificates and the bootstrap token in the state dir.
func (rc *runContext) ensurePKI(_ context.Context, r progress.Reporter) error {
	set, changes, err := ensureClusterPKI(rc.inv, rc.o)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		r(progress.Event{Kind: progress.Info, Message: ch.String()})
	}
	tok, renewed, err := bootstrapToken(rc.o.State, rc.o)
	if err != nil {
		return err
	}
	rc.setCredentials(set, tok)
	if renewed {
		r(progress.Event{Kind: progress.Info, Message: "bootstrap token " + tok.ID + ": created"})
	}
	return nil
}

// ensureClusterPKI generates or reuses the cluster's PKI in the state dir.
func ensureClusterPKI(c *inventory.Cluster, o Options) (*pki.Set, []pki.Change, error) {
	set, changes, err := pki.EnsureCluster(c, o.InventoryDir, o.State.PKI(), o.Now(), o.Rand)
	if err != nil {
		return nil, nil, fmt.Errorf("PKI in %s: %w", o.State.PKI(), err)
	}
	return set, changes, nil
}

// bootstrapToken reuses the state dir's token while more than half its TTL is left, so a
// re-run rewrites no worker's bootstrap kubeconfig; otherwise it writes a new one.
func bootstrapToken(d state.Dir, o Options) (kube.BootstrapToken, bool, error) {
	t, fresh, err := currentBootstrapToken(d, o)
	if err != nil || fresh {
		return t, false, err
	}
	if err := d.Write(d.BootstrapToken(), []byte(t.Value()+"\n"), 0o600); err != nil {
		return t, false, err
	}
	return t, true, nil
}
