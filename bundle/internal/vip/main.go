// Command kforge-vip holds the control plane's virtual IP (controlPlaneVIP) on one master at a
// time: kube-vip's ARP mode with its leader election, as a small runner. kube-vip itself cannot
// be built here (the Go module proxy refuses it), so this runner is put together from
// well-kept libraries, the first two kube-vip's own: k8s.io/client-go's leader election on a
// Lease, for who holds the address; github.com/vishvananda/netlink, to add and remove it;
// github.com/mdlayher/arp, to announce it.
//
// Every master runs it. The one holding the Lease (kube-system/kforge-vip) adds the address,
// as a /32, to the interface in the address's subnet and broadcasts gratuitous ARPs (three
// 200 ms apart, then one every 3 s) so that the link's neighbours send the address's traffic
// to it. A leader that cannot renew the Lease within 3 s removes the address; another master
// takes the Lease once it has not been renewed for 5 s, or within a second or two when the
// leader releases it on stopping (SIGINT, SIGTERM: it keeps the address until another master
// holds the Lease, 5 s at most, then resets the connections made to it and removes it). A runner that loses the Lease stands for election again. An address left by a run
// that crashed is removed before the first election.
//
// The Lease is reached through the kubeconfig of the configuration file, which must reach an
// API server without the virtual IP (the master's own). The runner writes the address, the
// interface, the Lease's holder and whether it holds the address to the state file.
//
// The bundle builder embeds this directory's files and compiles them into the bundle.
package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/kforge/kforge/bundle/daemon"
	"log"
	"os"
	"sync"

	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	daemon.Main("/etc/kforge/vip.json", "configuration file (JSON: address, interface, kubeconfig, identity, namespace, lease)",
		"/run/kforge-vip/state.json", "where the address, its interface, the lease's holder and whether this host holds the address are written", run)
}

func run(ctx context.Context, config, state string) error {
	c, err := ReadConfig(config)
	if err != nil {
		return err
	}
	vip, _ := vipOf(c.Address) // checked by ReadConfig
	addrs, err := hostAddrs()
	if err != nil {
		return err
	}
	if c.Interface, err = ChooseInterface(vip, c.Interface, addrs); err != nil {
		return err
	}
	leases, err := followKubeconfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	log.Printf("electing the holder of %s on %s as %s (lease %s/%s)", c.Address, c.Interface, c.Identity, c.Namespace, c.Lease)
	r := &Runner{
		Config:  c,
		Leases:  leases,
		Address: HostAddress{Interface: c.Interface, VIP: vip},
		Timing:  DefaultTiming,
		State:   state,
		Logf:    log.Printf,
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	log.Printf("stopped")
	return nil
}

// followedLeases is the Leases client of the kubeconfig file, rebuilt when the file changes:
// kforge rewrites it when the client certificate in it is renewed, or re-issued by a new CA,
// and the runner carries on with the new one without a restart (and without giving up the
// Lease). A file that cannot be used keeps the client before it.
type followedLeases struct {
	path   string
	mu     sync.Mutex
	data   []byte
	client coordinationv1.LeasesGetter
}

func followKubeconfig(path string) (*followedLeases, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := leasesClient(data)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return &followedLeases{path: path, data: data, client: client}, nil
}

// Leases is called for every request of the election (one a second): it reads the file then.
func (f *followedLeases) Leases(namespace string) coordinationv1.LeaseInterface {
	f.mu.Lock()
	defer f.mu.Unlock()
	if data, err := os.ReadFile(f.path); err == nil && !bytes.Equal(data, f.data) {
		if client, err := leasesClient(data); err != nil {
			log.Printf("kubeconfig %s changed but cannot be used, keeping the one before: %v", f.path, err)
		} else {
			log.Printf("kubeconfig %s changed: using its new credentials", f.path)
			f.client = client
		}
		f.data = data
	}
	return f.client.Leases(namespace)
}

func leasesClient(kubeconfig []byte) (coordinationv1.LeasesGetter, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// Each request gives up within the renewal deadline, as kube-controller-manager's leader
	// election client does.
	rc.Timeout = DefaultTiming.RenewDeadline
	return coordinationv1.NewForConfig(rest.AddUserAgent(rc, "kforge-vip"))
}
