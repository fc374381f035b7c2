package tasks

import (
	"time"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
)

// runContext is what the steps of one command share, built once by the command's constructor
// and handed to each step explicitly: the inventory, the options, the fleet (hosts,
// connections, facts), the credentials (the PKI set and the bootstrap token, once the pki step
// made them) and the API clients (dialled once, on first use, with those credentials).
// Progress goes to each step as its reporter.
type runContext struct {
	inv     *inventory.Cluster
	o       Options
	fleet   *fleet.Fleet
	started time.Time

	set   *pki.Set            // credentials: set by setCredentials
	token kube.BootstrapToken // credentials
	// dryRun makes every write through the API a server-side dry run (plan).
	dryRun bool
	api    *apiClients // clients: dialled on first use; dropped when the credentials change
	// kubeconfigWritten: the admin kubeconfig is in the state dir, so a later failure can
	// name it (Explain).
	kubeconfigWritten bool
}

// newRunContext is the run context of one command over cluster c's nodes.
func newRunContext(c *inventory.Cluster, nodes []inventory.Node, o Options) *runContext {
	o = o.withDefaults()
	return &runContext{inv: c, o: o, fleet: newFleet(c, nodes, o), started: o.Now()}
}

// setCredentials makes set and token the run's credentials; API clients made with the old
// ones are dropped.
func (rc *runContext) setCredentials(set *pki.Set, token kube.BootstrapToken) {
	rc.set, rc.token, rc.api = set, token, nil
}

// clients are the run's API clients, dialled on first use through the first master.
func (rc *runContext) clients() (apiClients, error) {
	if rc.api != nil {
		return *rc.api, nil
	}
	var api apiClients
	var err error
	if rc.dryRun && rc.o.API == nil {
		api, err = dialAPIClients(rc.inv, rc.set, rc.fleet, true)
	} else {
		api, err = newAPIClients(rc.inv, rc.set, rc.fleet, rc.o.API)
	}
	if err != nil {
		return apiClients{}, err
	}
	rc.api = &api
	return api, nil
}

// A hop is the cluster at one Kubernetes version: the inventory at that version (with its
// release row), the bundle's release of it, and the files rendered for it, over the run's
// context. apply works at one hop, the inventory's; an upgrade walks one per minor.
type hop struct {
	rc       *runContext
	inv      *inventory.Cluster
	manifest *bundle.Manifest // nil without a bundle
	files    *hostFiles
}

// newHop is the hop of the inventory's own version; its manifest is read by readBundle.
func newHop(rc *runContext) *hop { return &hop{rc: rc, inv: rc.inv, files: newHostFiles()} }

// atVersion is the hop of version v: the inventory at v and the bundle's release of it.
func atVersion(rc *runContext, v string) (*hop, error) {
	inv, err := rc.inv.AtVersion(v)
	if err != nil {
		return nil, err
	}
	m, err := bundle.LoadRelease(inv.Bundle, v)
	if err != nil {
		return nil, err
	}
	return &hop{rc: rc, inv: inv, manifest: m, files: newHostFiles()}, nil
}
