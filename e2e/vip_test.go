package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/templates"
)

// The control plane's virtual IP (issue 16): helpers of the HA test.

// checkVIP checks that the admin kubeconfig points at the VIP, that exactly one of masters holds
// it (its state file says so, the Lease names it, and only its interfaces carry the address),
// and that kubectl through the VIP works. It returns the holder.
func (c *cluster) checkVIP(ctx context.Context, k kubernetes.Interface, masters []lab.Host) string {
	c.t.Helper()
	cfg, err := clientcmd.LoadFromFile(filepath.Join(c.state, "admin.conf"))
	if err != nil {
		c.t.Fatal(err)
	}
	want := "https://" + net.JoinHostPort(c.vip, "6443")
	for name, cl := range cfg.Clusters {
		if cl.Server != want {
			c.t.Errorf("admin kubeconfig: cluster %s at %s, want the VIP %s", name, cl.Server, want)
		}
	}
	holder := c.vipHolder(ctx, k)
	var holding []string
	for _, m := range masters {
		var st struct {
			Address string `json:"address"`
			Holder  string `json:"holder"`
			Leading bool   `json:"leading"`
		}
		raw := c.exec(ctx, m.Name, "cat "+hostpath.VIPState)
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			c.t.Errorf("%s: %s: %v\n%s", m.Name, hostpath.VIPState, err, raw)
			continue
		}
		addrs := c.exec(ctx, m.Name, "ip -o -4 addr show")
		has := strings.Contains(addrs, " inet "+c.vip+"/")
		if st.Leading {
			holding = append(holding, m.Name)
		}
		if st.Address != c.vip || st.Leading != (m.Name == holder) || has != (m.Name == holder) {
			c.t.Errorf("%s: kforge-vip says %+v, address on an interface %v; the Lease names %s", m.Name, st, has, holder)
		}
	}
	if len(holding) != 1 {
		c.t.Errorf("masters holding the VIP %s: %v, want exactly one", c.vip, holding)
	}
	if out, err := c.kubectl(ctx, "get", "nodes"); err != nil {
		c.t.Errorf("kubectl through the VIP: %v\n%s", err, out)
	}
	return holder
}

// vipHolder is the holder the VIP's Lease names ("" when it cannot be read).
func (c *cluster) vipHolder(ctx context.Context, k kubernetes.Interface) string {
	l, err := k.CoordinationV1().Leases("kube-system").Get(ctx, templates.VIPLease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// handOverVIP moves the VIP off master m: its kforge-vip stops (releasing the Lease), another
// master takes the address, and m's kforge-vip starts again, standing by.
func (c *cluster) handOverVIP(ctx context.Context, k kubernetes.Interface, m lab.Host) {
	c.t.Helper()
	c.exec(ctx, m.Name, "systemctl stop "+hostpath.VIPUnit)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		h := c.vipHolder(ctx, k)
		return h != "" && h != m.Name, nil
	})
	c.exec(ctx, m.Name, "systemctl start "+hostpath.VIPUnit)
	if err != nil {
		c.t.Fatalf("the VIP did not leave %s within 30 s of its kforge-vip stopping (holder %q)", m.Name, c.vipHolder(ctx, k))
	}
}

// freshVIPClient returns, for each call, an admin client with a connection of its own to the
// VIP, as each kubectl run has: a kept-alive connection to a master that went away would time
// out on its own schedule, not the VIP's.
func (c *cluster) freshVIPClient() func() kubernetes.Interface {
	return c.freshClient(func(*rest.Config) {})
}

// freshClient returns, for each call, an admin client made from the state dir's admin
// kubeconfig as it is then (kforge rewrites it as certificates and CAs change), changed by
// edit, with a connection of its own closed after its request, as each kubectl run has.
func (c *cluster) freshClient(edit func(*rest.Config)) func() kubernetes.Interface {
	return func() kubernetes.Interface {
		cfg, err := c.adminConfig()
		if err != nil {
			return nil
		}
		// A Dial function keeps client-go from sharing a cached transport; no keep-alive closes
		// each connection after its request.
		cfg.Dial = (&net.Dialer{Timeout: 2 * time.Second}).DialContext
		edit(cfg)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			if t, ok := rt.(*http.Transport); ok {
				t.DisableKeepAlives = true
			}
			return rt
		}
		k, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil
		}
		return k
	}
}

// watchVIPMoved starts waiting, at once, until the Lease names a master other than dead and
// the API answers through the VIP on a new connection; the channel gets when, or the zero time
// after two minutes.
func (c *cluster) watchVIPMoved(ctx context.Context, k kubernetes.Interface, dead string) <-chan time.Time {
	fresh := c.freshVIPClient()
	done := make(chan time.Time, 1)
	go func() {
		var at time.Time
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			if h := c.vipHolder(ctx, k); h == "" || h == dead {
				return false, nil
			}
			v := fresh()
			if v == nil {
				return false, nil
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if _, err := v.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{}); err != nil {
				return false, nil
			}
			at = time.Now()
			return true, nil
		})
		done <- at
	}()
	return done
}
