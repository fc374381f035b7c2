package tasks

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/templates"
)

// The masters serve the bundle to the other nodes (inventory BundleFromMasters): the workstation
// uploads it to the masters only; each master runs a registry (kforge-registry.service) that
// kforge fills from the master's own binaries and containerd; the workers take what they lack
// from the masters' registries over the cluster network and get uploaded only what that left
// missing (a registry not up, a node without curl).

// registryFills is the run's wait for the masters' registries: the workers take the bundle from
// them once every master staged in this run has filled its own, or failed to (the workers then
// get uploaded what the registries lack). A nil one does not wait: an upgrade fills the
// registries before it stages the workers.
type registryFills struct {
	ready chan struct{}
	once  sync.Once
	mu    sync.Mutex
	left  int
}

func newRegistryFills(masters int) *registryFills {
	f := &registryFills{ready: make(chan struct{}), left: masters}
	if masters == 0 {
		f.release()
	}
	return f
}

// done says that one master's fill ended, filled or not.
func (f *registryFills) done() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.left--
	last := f.left == 0
	f.mu.Unlock()
	if last {
		f.release()
	}
}

// release ends the wait whatever is left: staging the masters failed.
func (f *registryFills) release() {
	if f != nil {
		f.once.Do(func() { close(f.ready) })
	}
}

func (f *registryFills) wait(ctx context.Context) error {
	if f == nil {
		return nil
	}
	select {
	case <-f.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fillRegistry starts master n's registry, restarted when its unit, configuration, certificate
// or binary changed, and fills it with what the other nodes need of the bundle. A registry
// that cannot be filled is reported, not fatal: the nodes then get the bundle uploaded.
func (t *hop) fillRegistry(ctx context.Context, n inventory.Node, h remote.Host, r progress.Reporter) {
	need := bundleNeed(t.inv, inventory.RoleWorker)
	need.Runtime = true // BundleFromMasters: the runtime is the bundle's
	files, images := bundle.Served(t.manifest, need)
	restart := t.files.wrote(n.Name, registryRestarts)
	runFill(ctx, n, h, startUnitScript(hostpath.RegistryUnit, restart)+" && {\n"+bundle.FillCommand(files, images, bundle.FillReplace)+"\n}",
		fmt.Sprintf("registry filled: %d files, %d images for the nodes", len(files), len(images)), "its registry was not filled (the nodes get the bundle uploaded instead)", r)
}

// runFill runs script, which ends in a bundle.FillCommand, on master n and reports done when it
// filled (saying so when what an earlier fill left was removed first). A fill that fails is
// reported with failed, not fatal: the nodes then get uploaded what the registry lacks.
func runFill(ctx context.Context, n inventory.Node, h remote.Host, script, done, failed string, r progress.Reporter) {
	out, err := remote.Output(ctx, h, script)
	if err != nil {
		r(progress.Event{Kind: progress.Info, Host: n.Name, Message: fmt.Sprintf("%s: %v", failed, err)})
		return
	}
	if strings.HasSuffix(strings.TrimSpace(string(out)), bundle.Filled) {
		if slices.Contains(strings.Split(string(out), "\n"), bundle.FillReplaced) {
			done += " (what an earlier fill left was removed first)"
		}
		r(progress.Event{Kind: progress.Info, Host: n.Name, Message: done})
	}
}

// registryRestarts says whether path p is an input of the masters' registry: a change restarts it.
func registryRestarts(p string) bool {
	switch p {
	case hostpath.RegistryUnitPath, hostpath.RegistryConfig, hostpath.RegistryPath, hostpath.RegistryCertPath, hostpath.RegistryKeyPath:
		return true
	}
	return false
}

// isRegistryClientFile says whether p is a file a node needs before it takes the bundle from the
// masters' registries: containerd's hosts.toml files and the cluster CA they trust.
func isRegistryClientFile(p string) bool {
	return p == hostpath.CACert || strings.HasPrefix(p, hostpath.RegistryConfigDir+"/")
}

// pushCredentials pushes a master's credentials (isCredential) and, when its registry's
// certificate was among them (renewed, or re-issued by rotate-ca), restarts the registry if it
// runs: distribution reads its certificate only when it starts.
func pushCredentials(ctx context.Context, files *hostFiles, h remote.Host) error {
	if err := push(ctx, files, h, isCredential); err != nil {
		return err
	}
	return restartRegistry(ctx, files, h)
}

// restartRegistry restarts the master's registry when this run wrote its certificate.
func restartRegistry(ctx context.Context, files *hostFiles, h remote.Host) error {
	if files.wrote(h.Name(), registryRestarts) {
		return h.Run(ctx, remote.Cmd{Command: "systemctl try-restart " + hostpath.RegistryUnit})
	}
	return nil
}

// mirrorsFor are the masters' registries node n takes the bundle from, in its order; none for
// masters, which get the bundle uploaded, and without BundleFromMasters.
func (t *hop) mirrorsFor(n inventory.Node) []string {
	if n.Role == inventory.RoleMaster {
		return nil
	}
	return templates.MasterRegistries(t.inv, n)
}
