package tasks

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/release"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// The addons kforge runs in every cluster (kube-proxy and CoreDNS, flannel, the NetworkPolicy
// agent, metrics-server, the local volumes' provisioner) are objects made through the API from
// one addonKit: apply installs them step by step (bringUp), plan dry-runs them, an upgrade moves
// them to each hop's release (upgradeAddons). Each addon is a function of the kit.

// addonKit is what the addons' objects are made from at one hop.
type addonKit struct {
	inv       *inventory.Cluster
	images    release.Images
	api       kube.Clients
	proxyMode string // kube-proxy's mode: the inventory's, or auto's choice on the hosts' facts
	upstream  string // the nodes' resolv.conf files that CoreDNS forwards to (upstreamResolv)
}

// An addon makes (or, in a dry run, diffs) its objects.
type addon func(ctx context.Context, k addonKit) ([]kube.Change, error)

// addonKit reads the hop's kit: its images (the bundle must hold them), the API's clients.
func (h *hop) addonKit() (addonKit, error) {
	im, err := addonImages(h.inv, h.manifest)
	if err != nil {
		return addonKit{}, err
	}
	api, err := h.rc.clients()
	if err != nil {
		return addonKit{}, err
	}
	all := h.rc.fleet.AllFacts()
	return addonKit{inv: h.inv, images: im, api: api.Clients, proxyMode: facts.ProxyMode(h.inv, all), upstream: upstreamResolv(h.inv, all)}, nil
}

// addonStep is a step that makes one addon's objects and says what changed, as label: ….
func (h *hop) addonStep(label string, objects addon) func(context.Context, progress.Reporter) error {
	return func(ctx context.Context, r progress.Reporter) error {
		k, err := h.addonKit()
		if err != nil {
			return err
		}
		cs, err := objects(ctx, k)
		r(progress.Event{Kind: progress.Info, Message: label + ": " + kube.Summary(cs)})
		return err
	}
}

// hopAddons are the addons of inventory c, in the order they are made: the core, flannel when
// it is the pod network, the NetworkPolicy agent, metrics-server, the local volumes (the last
// three are also removed through their functions when the inventory turns them off).
func hopAddons(c *inventory.Cluster) []addon {
	out := []addon{coreAddonObjects}
	if c.Networking.Plugin == "flannel" {
		out = append(out, podNetworkObjects)
	}
	return append(out, networkPolicyObjects, metricsServerObjects, localVolumesObjects)
}

// addonImages are the addon images of c's release: with a bundle (m, its release of c's
// version), as the bundle names them (under registry.k8s.io) and holds them; without, under the
// inventory's image repository.
func addonImages(c *inventory.Cluster, m *bundle.Manifest) (release.Images, error) {
	r := c.Release()
	if m == nil {
		return r.Images(c.ImageRepository), nil
	}
	im := r.Images("") // the bundle's images carry registry.k8s.io's names
	need := []string{im.CoreDNS, im.KubeProxy, im.Flannel}
	if c.Networking.NetworkPolicy != inventory.NetworkPolicyOff {
		need = append(need, im.NetworkPolicy)
	}
	if c.MetricsServer.On() {
		need = append(need, im.MetricsServer)
	}
	if c.LocalVolumes.On() {
		need = append(need, im.LocalPath, im.LocalPathHelper)
	}
	if err := m.HasImages(need...); err != nil {
		return release.Images{}, fmt.Errorf("bundle %s: %w", c.Bundle, err)
	}
	return im, nil
}

// coreAddons installs kube-proxy and CoreDNS once the masters have their images (the rest of
// the bundle, which stage ships in the background).
func coreAddons(ctx context.Context, t *hop, st *staging, r progress.Reporter) error {
	if err := st.waitShipments(ctx); err != nil {
		return err
	}
	k, err := t.addonKit()
	if err != nil {
		return err
	}
	cs, err := coreAddonObjects(ctx, k)
	if err == nil && kubeProxyRestarts(cs) {
		var api apiClients
		if api, err = t.rc.clients(); err == nil {
			err = kube.RestartDaemonSet(ctx, api.Typed, "kube-system", "kube-proxy", t.rc.o.Now())
		}
		if err == nil {
			r(progress.Event{Kind: progress.Info, Message: "kube-proxy's configuration changed: its pods restart"})
		}
	}
	if k.proxyMode != inventory.ProxyModeIptables {
		r(progress.Event{Kind: progress.Info, Message: "kube-proxy in " + k.proxyMode + " mode (kubeProxy.mode " + t.inv.KubeProxy.Mode + ")"})
	}
	r(progress.Event{Kind: progress.Info, Message: kube.Summary(cs)})
	return err
}

func coreAddonObjects(ctx context.Context, k addonKit) ([]kube.Change, error) {
	all, err := kube.KubeProxy(ctx, k.api.Typed, kube.KubeProxyInputFor(k.inv, k.images, k.proxyMode))
	if err != nil {
		return all, err
	}
	in := kube.CoreDNSInputFor(k.inv, k.images)
	in.Upstream = k.upstream
	cs, err := kube.CoreDNS(ctx, k.api.Typed, in)
	return append(all, cs...), err
}

// upstreamResolv identifies, by their contents, the resolv.conf files the nodes' kubelets give
// pods (each host's as KubeletFor chooses it), which CoreDNS forwards to: a hash of their
// distinct sha256 sums (a node added with the same file changes nothing). "" when no host
// reported one.
func upstreamResolv(c *inventory.Cluster, hosts map[string]*facts.Facts) string {
	var sums []string
	for _, f := range hosts {
		if f == nil {
			continue
		}
		if s := f.Files[cmp.Or(c.Kubelet.ResolvConf, f.KubeletResolvConf(), hostpath.ResolvConf)]; s != "" && !slices.Contains(sums, s) {
			sums = append(sums, s)
		}
	}
	if len(sums) == 0 {
		return ""
	}
	slices.Sort(sums)
	h := sha256.Sum256([]byte(strings.Join(sums, "\n")))
	return hex.EncodeToString(h[:8])
}

// kubeProxyRestarts says whether kube-proxy's pods are restarted after these changes: it reads
// its configuration and kubeconfig (the API server's address) only when it starts, so a changed
// one is rolled out, as after a restore onto new masters.
func kubeProxyRestarts(cs []kube.Change) bool {
	return slices.ContainsFunc(cs, func(c kube.Change) bool {
		return c.Kind == "ConfigMap" && c.Name == "kube-proxy" && c.Action == kube.Updated
	})
}

// podNetwork installs flannel and writes each node's CNI config over its pod CIDR as soon as
// the node has one (kubelet reports the node NotReady until then). Nodes that registered
// without a pod CIDR get one from kforge right away (kube.PodCIDRs says how it stays clear of
// kube-controller-manager's node IPAM).
func (h *hop) podNetwork(ctx context.Context, r progress.Reporter) error {
	rc := h.rc
	k, err := h.addonKit()
	if err != nil {
		return err
	}
	cs, err := podNetworkObjects(ctx, k)
	if err != nil {
		return err
	}
	r(progress.Event{Kind: progress.Info, Message: "flannel: " + kube.Summary(cs)})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(rc.fleet.Limits().Hosts, remote.DefaultConcurrency))
	_, cs, err = kube.PodCIDRs(gctx, k.api.Typed, kube.PodCIDRsInput{
		Nodes: rc.fleet.Names(inventory.AnyNode), Timeout: rc.o.Timeout,
		Subnets: h.inv.Networking.PodSubnets(), MaskSizes: h.inv.Networking.NodeCIDRMaskSizes(),
		Have: func(node string, cidrs []string) {
			g.Go(func() error { return remote.WithHost(node, h.writeCNIConfig(gctx, node, cidrs, k.proxyMode, r)) })
		},
	})
	if len(cs) > 0 {
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("gave %s a pod CIDR", count(len(cs), "node"))})
	}
	if werr := g.Wait(); err == nil {
		err = werr
	}
	return err
}

func podNetworkObjects(ctx context.Context, k addonKit) ([]kube.Change, error) {
	return kube.Flannel(ctx, k.api.Typed, kube.FlannelInputFor(k.inv, k.images, k.proxyMode))
}

// writeCNIConfig writes node's CNI config for its pod CIDRs (nftables' masquerading with
// kube-proxy in nftables mode).
func (h *hop) writeCNIConfig(ctx context.Context, node string, cidrs []string, proxyMode string, r progress.Reporter) error {
	conf, err := templates.FlannelCNIConfig(cidrs, h.inv.Networking.PodSubnets(), proxyMode == inventory.ProxyModeNftables)
	if err != nil {
		return err
	}
	h.files.add(node, templates.File{Path: hostpath.CNIConfFile, Mode: 0o600, Data: conf}) // CIS 1.1.9
	if err := push(ctx, h.files, h.rc.fleet.Host(node), func(p string) bool { return p == hostpath.CNIConfFile }); err != nil {
		return err
	}
	what := "CNI config unchanged"
	if h.files.wrote(node, func(p string) bool { return p == hostpath.CNIConfFile }) {
		what = "CNI config written"
	}
	r(progress.Event{Kind: progress.HostDone, Host: node, Message: "pod CIDR " + strings.Join(cidrs, ",") + "; " + what})
	return nil
}

// networkPolicyObjects runs the NetworkPolicy agent on every node (the AdminNetworkPolicy CRDs
// first, when asked), or removes it when the inventory turns enforcement off.
func networkPolicyObjects(ctx context.Context, k addonKit) ([]kube.Change, error) {
	in := kube.NetworkPolicyInputFor(k.inv, k.images)
	var cs []kube.Change
	if in.Admin && in.Enforce {
		var err error
		if cs, err = kube.ApplyManifests(ctx, k.api.Dynamic, k.api.Mapper, kube.ApplyInput{Manifests: kube.AdminNetworkPolicyCRDs()}); err != nil {
			return cs, err
		}
	}
	more, err := kube.NetworkPolicies(ctx, k.api.Typed, in)
	return append(cs, more...), err
}

// metricsServerObjects runs metrics-server, or removes it when the inventory turns it off.
func metricsServerObjects(ctx context.Context, k addonKit) ([]kube.Change, error) {
	return kube.MetricsServer(ctx, k.api.Typed, k.api.Dynamic, kube.MetricsServerInput{Enabled: k.inv.MetricsServer.On(), Image: k.images.MetricsServer})
}

// localVolumesObjects serves the local volumes' StorageClass, or removes it when the inventory
// turns it off.
func localVolumesObjects(ctx context.Context, k addonKit) ([]kube.Change, error) {
	l := k.inv.LocalVolumes
	return kube.LocalVolumes(ctx, k.api.Typed, kube.LocalVolumesInput{Enabled: l.On(), Image: k.images.LocalPath, Helper: k.images.LocalPathHelper, Path: l.Path})
}
