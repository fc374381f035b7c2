package inventory

import (
	"errors"
	"net"
	"strings"

	"github.com/kforge/kforge/release"
)

// setDefaults fills every field the user may leave out. It runs after decoding and before
// validation, so validation sees the values kforge will really use.
func (c *Cluster) setDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.KubernetesVersion, release.Default())
	// "1.36.3" means v1.36.3; anything else stays as written, so that an error quotes it.
	if c.KubernetesVersion != "" && c.KubernetesVersion[0] >= '0' && c.KubernetesVersion[0] <= '9' {
		c.KubernetesVersion = "v" + c.KubernetesVersion
	}
	def(&c.ImageRepository, DefaultImageRepository)
	if c.ControlPlaneEndpoint != "" {
		var ae *net.AddrError
		if _, _, err := net.SplitHostPort(c.ControlPlaneEndpoint); errors.As(err, &ae) && ae.Err == "missing port in address" {
			c.ControlPlaneEndpoint = net.JoinHostPort(c.ControlPlaneEndpoint, "6443")
		}
	}

	if c.APIProxy.Port == 0 {
		c.APIProxy.Port = DefaultAPIProxyPort
	}

	n := &c.Networking
	def(&n.PodSubnet, DefaultPodSubnet)
	def(&n.ServiceSubnet, DefaultServiceSubnet)
	def(&n.DNSDomain, DefaultDNSDomain)
	def(&n.Plugin, "flannel")
	def(&n.NetworkPolicy, NetworkPolicyEnforce)
	def(&c.KubeProxy.Mode, ProxyModeAuto)
	def(&c.Firewall, FirewallCheck)
	if n.NodeCIDRMaskSize == 0 {
		n.NodeCIDRMaskSize = DefaultNodeCIDRMaskSize
		if strings.Contains(n.PodSubnets()[0], ":") {
			n.NodeCIDRMaskSize = DefaultNodeCIDRMaskSizeIPv6
		}
	}
	if n.NodeCIDRMaskSizeIPv6 == 0 {
		n.NodeCIDRMaskSizeIPv6 = DefaultNodeCIDRMaskSizeIPv6
	}

	p := &c.PKI
	def(&p.KeyAlgorithm, "ecdsa-p256")
	if p.CertValidity == 0 {
		p.CertValidity = DefaultCertValidity
	}
	if p.CAValidity == 0 {
		p.CAValidity = DefaultCAValidity
	}

	s := &c.SSH
	def(&s.User, DefaultSSHUser)
	if s.Port == 0 {
		s.Port = DefaultSSHPort
	}
	def(&s.KnownHostsFile, DefaultKnownHostsFile)
	def(&s.Sudo, "auto")
	if s.Agent == nil {
		yes := true
		s.Agent = &yes
	}

	if c.EtcdSnapshots.Every == 0 {
		c.EtcdSnapshots.Every = DefaultEtcdSnapshotsEvery
	}
	if c.EtcdSnapshots.Keep == 0 {
		c.EtcdSnapshots.Keep = DefaultEtcdSnapshotsKeep
	}
	def(&c.LocalVolumes.Path, DefaultLocalVolumesPath)

	sec := &c.Security
	def(&sec.EncryptionAtRest, EncryptionSecretbox)
	for _, d := range []struct {
		p *int
		v int
	}{{&sec.Audit.MaxAge, DefaultAuditMaxAge}, {&sec.Audit.MaxBackups, DefaultAuditMaxBackups}, {&sec.Audit.MaxSize, DefaultAuditMaxSize}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	def(&sec.PodSecurity.Enforce, DefaultPodSecurityEnforce)
	def(&sec.PodSecurity.Warn, DefaultPodSecurityWarn)
	def(&sec.PodSecurity.Audit, DefaultPodSecurityAudit)

	def(&c.Kubelet.CgroupDriver, "systemd")
	def(&c.ContainerRuntime.Endpoint, DefaultCRIEndpoint)
	if c.Bundle != "" {
		def(&c.ContainerRuntime.Install, RuntimeFromBundle)
	}
	def(&c.ContainerRuntime.Install, RuntimeFromHost)
}
