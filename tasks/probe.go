package tasks

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

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
