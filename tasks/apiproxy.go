package tasks

import (
	"context"
	"fmt"
	"strings"

	"github.com/kforge/kforge/facts"
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
func (a *Apply) startAPIProxy(ctx context.Context, n inventory.Node, h remote.Host) (string, error) {
	restart := apiProxyRestarts(func(pred func(string) bool) bool { return a.files.wrote(n.Name, pred) })
	if _, err := remote.Output(ctx, h, apiProxyScript(restart)); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("API proxy on 127.0.0.1:%d", a.inv.APIProxy.Port)
	switch {
	case restart:
		msg += " (re)started"
	case a.files.wrote(n.Name, func(p string) bool { return p == hostpath.APIProxyConfig }):
		msg += " follows its new backends"
	}
	return msg, nil
}

// apiProxyScript enables and starts the API proxy's unit, restarting it when restart says so
// (its unit or binary was written: systemd reloads first).
func apiProxyScript(restart bool) string {
	if restart {
		return "systemctl daemon-reload && " + unitScript(hostpath.APIProxyUnit, true)
	}
	return unitScript(hostpath.APIProxyUnit, false)
}

// apiProxyRestarts says whether the API proxy restarts on a host: when its unit or binary was
// written.
func apiProxyRestarts(wrote func(pred func(string) bool) bool) bool {
	return wrote(func(p string) bool { return p == hostpath.APIProxyUnitPath || p == hostpath.APIProxyPath })
}

// hasAPIProxy says whether an earlier run installed the API proxy on a host (its unit is there).
func hasAPIProxy(f *facts.Facts) bool {
	if f == nil {
		return false
	}
	_, ok := f.Files[hostpath.APIProxyUnitPath]
	return ok
}

// retireAPIProxyScript stops, disables and removes the API proxy (its unit, configuration,
// state and binary), printing "removed" when there was one.
const retireAPIProxyScript = `[ -f ` + hostpath.APIProxyUnitPath + ` ] || exit 0
systemctl disable -q --now ` + hostpath.APIProxyUnit + ` || exit 1
rm -f ` + hostpath.APIProxyUnitPath + ` ` + hostpath.APIProxyConfig + ` ` + hostpath.APIProxyState + ` ` + hostpath.APIProxyPath + ` && systemctl daemon-reload && echo removed`

// retired says what the retire step removes where an earlier run installed it: the node-local
// API proxy, once the cluster has a controlPlaneEndpoint or one master (the kubelets and
// addons were moved to that endpoint by the steps before), and kforge-vip, once the inventory
// has no controlPlaneVIP.
func (a *Apply) retired() []string {
	var out []string
	if !a.inv.LocalAPIProxy() {
		out = append(out, "the node-local API proxy (the nodes now use "+pki.NodeEndpoint(a.inv)+")")
	}
	if a.inv.ControlPlaneVIP == "" {
		out = append(out, "kforge-vip (no controlPlaneVIP)")
	}
	return out
}

// retire removes what retired names from the hosts that have it.
func (a *Apply) retire(ctx context.Context, r progress.Reporter) error {
	return a.fleet.Each(ctx, "", func(ctx context.Context, n inventory.Node, h remote.Host) error {
		f := a.fleet.Facts(n.Name)
		var did []string
		for _, u := range []struct {
			retire bool
			script string
			msg    string
		}{
			{!a.inv.LocalAPIProxy() && hasAPIProxy(f), retireAPIProxyScript, "API proxy stopped and removed: the node uses " + pki.NodeEndpoint(a.inv)},
			{a.inv.ControlPlaneVIP == "" && hasVIP(f), retireVIPScript, "virtual IP released, kforge-vip stopped and removed: the admin kubeconfig uses " + pki.Endpoint(a.inv)},
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
