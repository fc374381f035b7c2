package tasks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/remote"
)

// probeNow asks what the kubelet's readiness probes of pod ask (a container's startup probe
// when it has none), through a master's SSH connection d, now rather than on the probes'
// schedule: kubeadm's startup probes first look 10 s after a start and then every 10 s, which
// made each master of a rolling certificate renewal wait half a minute for pods that were up.
// It returns why a container is not ready yet, or "" when every one answers as the kubelet
// wants (an HTTP status from 200 to 399). nodeIP is the host's address, for probes without one.
func probeNow(ctx context.Context, d remote.Dialer, nodeIP string, pod *corev1.Pod) string {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: d.DialContext,
		// As the kubelet probes: an HTTPS probe does not verify the server's certificate.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
	for _, c := range pod.Spec.Containers {
		url := probeURL(c, nodeIP)
		if url == "" {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err.Error()
		}
		res, err := client.Do(req)
		if err != nil {
			return fmt.Sprintf("%s: %s: %v", c.Name, url, err)
		}
		res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode >= 400 {
			return fmt.Sprintf("%s: %s: %s", c.Name, url, res.Status)
		}
	}
	return ""
}

// probeURL is the URL of container c's readiness probe (or startup probe), "" when it has no
// HTTP one.
func probeURL(c corev1.Container, nodeIP string) string {
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet == nil {
		p = c.StartupProbe
	}
	if p == nil || p.HTTPGet == nil {
		return ""
	}
	g := p.HTTPGet
	port := g.Port.IntValue()
	if port == 0 {
		for _, cp := range c.Ports {
			if cp.Name == g.Port.String() {
				port = int(cp.ContainerPort)
			}
		}
	}
	host := g.Host
	if host == "" {
		host = nodeIP
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + g.Path
}

// served are the certificates a master's components serve from files they read again while
// they run (templates.Reloaded), with the port each is served on (the node's address).
var served = []struct {
	file, by string
	port     int
}{
	{path.Join(hostpath.PKIDir, "apiserver.crt"), "kube-apiserver", pki.APIServerPort},
	{path.Join(hostpath.PKIDir, "etcd/server.crt"), "etcd", 2379},
	{path.Join(hostpath.PKIDir, "etcd/peer.crt"), "etcd (peers)", 2380},
}

// servedNew names the components of master that serve a certificate this run wrote.
func servedNew(files *hostFiles, master string) []string {
	var out []string
	for _, s := range served {
		if files.wrote(master, func(p string) bool { return p == s.file }) {
			out = append(out, s.by)
		}
	}
	return out
}

// waitServed waits until every master of masters serves the certificates this run wrote there
// that its components reload on their own (nothing restarts them), asking every 250 ms through
// its SSH connection. kube-apiserver sees a new serving certificate on the file's event (or
// within a minute), etcd at the next TLS handshake.
func waitServed(ctx context.Context, f *fleet.Fleet, files *hostFiles, masters []inventory.Node, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, n := range masters {
		d, err := f.Dialer(n.Name)
		if err != nil {
			return err
		}
		for _, s := range served {
			if !files.wrote(n.Name, func(p string) bool { return p == s.file }) {
				continue
			}
			want := files.get(n.Name, func(p string) bool { return p == s.file })
			certs, err := pki.ParseCerts(want[0].Data)
			if err != nil || len(certs) == 0 {
				return fmt.Errorf("%s: %s: %v", n.Name, s.file, err)
			}
			addr := net.JoinHostPort(n.NodeIP(), strconv.Itoa(s.port))
			for {
				why := serves(ctx, d, addr, certs[0].Raw)
				if why == "" {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s: %s does not serve the new %s after %s: %s", n.Name, addr, s.file, timeout, why)
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// serves says why addr does not serve the certificate want (DER), or "" when it does. It only
// reads the certificate the server sends: the handshake may then fail for want of a client
// certificate (etcd asks for one).
func serves(ctx context.Context, d remote.Dialer, addr string, want []byte) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	var got []byte
	c := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, // the certificate itself is compared
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 {
				got = raw[0]
			}
			return nil
		}})
	err = c.HandshakeContext(ctx)
	switch {
	case got == nil && err != nil:
		return err.Error()
	case got == nil:
		return "no certificate served"
	case !bytes.Equal(got, want):
		return "it serves the previous certificate"
	}
	return ""
}

// kubeletClientReloaded is what kube-apiserver answers an upgrade request to a kubelet's
// /healthz once it has reached the kubelet: the TLS handshake, with the client certificate it
// just read, completed, and the kubelet answered 200 instead of switching protocols.
const kubeletClientReloaded = "invalid upgrade response: status code 200"

// reloadKubeletClient makes master n's kube-apiserver load its kubelet client certificate from
// disk now, and waits until it has; it returns how many requests that took.
//
// client-go reads that certificate again at every TLS handshake with a kubelet (and every 5
// minutes), and when it changed closes every connection to every kubelet, the one in its
// handshake included (k8s.io/client-go/transport: certRotatingDialer). Left to itself, the first
// kubectl logs or exec that opens a connection after a renewal fails with "use of closed network
// connection". An upgrade request through the API server always dials a new connection
// (k8s.io/apimachinery's UpgradeAwareHandler), so kforge sends one to n's own kubelet: the
// first takes the cut, the next completes a handshake with the new certificate.
func reloadKubeletClient(ctx context.Context, c *inventory.Cluster, set *pki.Set, f *fleet.Fleet, n inventory.Node, timeout time.Duration) (int, error) {
	cfg, err := restConfigVia(c, set, f, "super-admin.conf", n.Host)
	if err != nil {
		return 0, err
	}
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"} // a Connection header is HTTP/1.1's
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return 0, err
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/api/v1/nodes/" + n.Name + "/proxy/healthz"
	tries, err := upgradeUntilReloaded(ctx, rt, url, timeout)
	if err != nil {
		return tries, fmt.Errorf("kube-apiserver did not reach its kubelet with its new kubelet client certificate within %s: %w", timeout, err)
	}
	return tries, nil
}

// upgradeUntilReloaded sends upgrade requests to url (a kubelet's /healthz through the API
// server) until the answer says a handshake with the kubelet completed, every 250 ms within
// timeout; it returns how many it sent.
func upgradeUntilReloaded(ctx context.Context, rt http.RoundTripper, url string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for tries := 1; ; tries++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return tries, err
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "kforge-reload")
		res, err := rt.RoundTrip(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
			res.Body.Close()
			if strings.Contains(string(body), kubeletClientReloaded) {
				return tries, nil
			}
			last = fmt.Sprintf("%s: %s", res.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return tries, fmt.Errorf("%d upgrade requests to %s, the last answered: %s", tries, url, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
