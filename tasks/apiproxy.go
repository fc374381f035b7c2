package tasks

import (
	"context"
	"fmt"
	"strings"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
)

// The node-local API proxy (kforge-apiproxy, built into the bundle from
// bundle/internal/apiproxy): with several masters and no controlPlaneEndpoint, every node's
// kubelet, kube-proxy and flannel reach the API servers through 127.0.0.1:apiProxy.port
// (pki.NodeEndpoint). stage starts it before the kubelet; when the cluster gets an endpoint
// (or is down to one master), the retire step removes it once the kubelets use the new one.

// startAPIProxy enables and starts the node-local API proxy before the kubelet that uses it;
// it restarts only for a new unit or binary: a new configuration (masters added or removed)
// it follows by itself.
func (t *hop) startAPIProxy(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
	restart := apiProxyRestarts(func(pred func(string) bool) bool { return t.files.wrote(n.Name, pred) })
	if _, err := remote.Output(ctx, h, startUnitScript(hostpath.APIProxyUnit, restart)); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("API proxy on 127.0.0.1:%d", t.inv.APIProxy.Port)
	switch {
	case restart:
		msg += " (re)started"
	case t.files.wrote(n.Name, func(p string) bool { return p == hostpath.APIProxyConfig }):
		msg += " follows its new backends"
	}
	return msg, nil
}

// apiProxyRestarts says whether the API proxy restarts on a host: when its unit or binary was
// written.
func apiProxyRestarts(wrote func(pred func(string) bool) bool) bool {
	return wrote(func(p string) bool { return p == hostpath.APIProxyUnitPath || p == hostpath.APIProxyPath })
}

// retired says what the retire step removes where an earlier run installed it: the node-local
// API proxy, once the cluster has a controlPlaneEndpoint or one master (the kubelets and
// addons were moved to that endpoint by the steps before), and kforge-vip, once the inventory
// has no controlPlaneVIP.
func retired(c *inventory.Cluster) []string {
	var out []string
	if !c.LocalAPIProxy() {
		out = append(out, "the node-local API proxy (the nodes now use "+pki.NodeEndpoint(c)+")")
	}
	if c.ControlPlaneVIP == "" {
		out = append(out, "kforge-vip (no controlPlaneVIP)")
	}
	if !c.ScheduledSnapshots() {
		out = append(out, "the scheduled etcd snapshots' timer (etcdSnapshots off; the snapshots taken stay in "+hostpath.EtcdSnapshotDir+")")
	}
	return out
}

// retire removes what retired names from the hosts that have it.
func (rc *runContext) retire(ctx context.Context, r progress.Reporter) error {
	c := rc.inv
	return rc.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		f := rc.fleet.Facts(n.Name)
		var did []string
		for _, u := range []struct {
			retire bool
			script string
			msg    string
		}{
			{!c.LocalAPIProxy() && hasUnit(f, hostpath.APIProxyUnitPath),
				retireUnitScript(hostpath.APIProxyUnit, hostpath.APIProxyUnitPath, hostpath.APIProxyConfig, hostpath.APIProxyState, hostpath.APIProxyPath),
				"API proxy stopped and removed: the node uses " + pki.NodeEndpoint(c)},
			{c.ControlPlaneVIP == "" && hasUnit(f, hostpath.VIPUnitPath),
				retireUnitScript(hostpath.VIPUnit, hostpath.VIPUnitPath, hostpath.VIPConfig, hostpath.VIPState, hostpath.VIPPath),
				"virtual IP released, kforge-vip stopped and removed: the admin kubeconfig uses " + pki.Endpoint(c)},
			{n.Role == inventory.RoleMaster && !c.ScheduledSnapshots() && hasUnit(f, hostpath.EtcdSnapshotTimerPath),
				retireUnitScript(hostpath.EtcdSnapshotTimer, hostpath.EtcdSnapshotTimerPath, hostpath.EtcdSnapshotUnitPath, hostpath.EtcdSnapshotConfig, hostpath.EtcdSnapshotPath),
				"scheduled etcd snapshots stopped and their timer removed (the snapshots stay in " + hostpath.EtcdSnapshotDir + ")"},
		} {
			if !u.retire {
				continue
			}
			out, err := remote.Output(ctx, h, u.script)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(out)) == "removed" {
				did = append(did, u.msg)
			}
		}
		if len(did) > 0 {
			r(progress.Event{Kind: progress.HostDone, Host: n.Name, Message: strings.Join(did, "; ")})
		}
		return nil
	})
}
