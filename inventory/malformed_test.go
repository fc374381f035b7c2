package inventory

import (
	"errors"
	"strings"
	"testing"
)

// head is lines 1-3 of most cases below; the line numbers in the table count from it.
const head = "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: t\n"

// m1 is a valid masters block (lines 4-6 when it follows head).
const m1 = "masters:\n  - name: m1\n    address: 10.0.0.1\n"

// dual6 is a masters block (lines 4-7 when it follows head) whose host has an IPv6 address.
const dual6 = "masters:\n  - name: m1\n    address: 10.0.0.1\n    ipv6Address: 2001:db8::1\n"

// dualNet is a networking block (lines 4-6 when it follows head) of a dual-stack cluster with
// the IPv6 Service range svc6.
func dualNet(svc6 string) string {
	return "networking:\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56\n  serviceSubnet: 10.96.0.0/12," + svc6 + "\n"
}

// TestMalformedInventories: every bad inventory is refused with the exact line, the field's
// path, and a message naming what is wrong.
func TestMalformedInventories(t *testing.T) {
	cases := []struct {
		name  string
		doc   string
		env   map[string]string
		line  int
		field string
		msg   string
	}{
		{"empty file", "", nil, 1, "", "file is empty"},
		{"yaml syntax", head + "masters:\n  - name: m1\n   address: [\n", nil, 4, "", "YAML syntax"},
		{"two documents", head + m1 + "---\nname: x\n", nil, 7, "", "second YAML document"},
		{"not a mapping", "- a\n- b\n", nil, 1, "", "want a mapping"},
		{"missing apiVersion", "kind: Cluster\nname: t\n" + m1, nil, 1, "apiVersion", "apiVersion is required"},
		{"wrong apiVersion", "apiVersion: kforge.dev/v2\nkind: Cluster\nname: t\n" + m1, nil, 1, "apiVersion", `unsupported apiVersion "kforge.dev/v2"`},
		{"wrong kind", "apiVersion: kforge.dev/v1alpha1\nkind: Clustr\nname: t\n" + m1, nil, 2, "kind", `unsupported kind "Clustr"`},
		{"unknown top-level field", head + "mastres: []\n" + m1, nil, 4, "mastres", `unknown field "mastres"`},
		{"unknown host field, suggestion", head + "masters:\n  - name: m1\n    adress: 10.0.0.1\n", nil, 6, "masters[0].adress", `did you mean "address"`},
		{"duplicate key", head + "name: u\n" + m1, nil, 4, "name", `"name" is set twice (first on line 3)`},
		{"cluster name invalid", "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\nname: My_Cluster\n" + m1, nil, 3, "name", `"My_Cluster" is not a valid cluster name`},
		{"cluster name missing", "apiVersion: kforge.dev/v1alpha1\nkind: Cluster\n" + m1, nil, 1, "name", "cluster name is required"},
		{"no masters", head + "masters: []\n", nil, 4, "masters", "at least one master"},
		{"masters not a list", head + "masters: m1\n", nil, 4, "masters", "want a list"},
		{"host name missing", head + "masters:\n  - address: 10.0.0.1\n", nil, 5, "masters[0].name", "name is required"},
		{"host name not a DNS label", head + "masters:\n  - name: M1.local\n    address: 10.0.0.1\n", nil, 5, "masters[0].name", `"M1.local" is not a valid node name`},
		{"address missing", head + "masters:\n  - name: m1\n", nil, 5, "masters[0].address", "address is required"},
		{"address invalid IP", head + "masters:\n  - name: m1\n    address: 10.0.0.256\n", nil, 6, "masters[0].address", `"10.0.0.256" is not a valid address`},
		{"DNS address without internalAddress", head + "masters:\n  - name: m1\n    address: m1.example.com\n", nil, 5, "masters[0].internalAddress", "is a DNS name and no internalAddress"},
		{"internalAddress not an IP", head + "masters:\n  - name: m1\n    address: 10.0.0.1\n    internalAddress: eth0\n", nil, 7, "masters[0].internalAddress", `"eth0" is not an IP address`},
		{"duplicate name", head + m1 + "workers:\n  - name: m1\n    address: 10.0.0.2\n", nil, 8, "workers[0].name", `name "m1" is already used by masters[0]`},
		{"duplicate address", head + m1 + "workers:\n  - name: w1\n    address: 10.0.0.1\n", nil, 9, "workers[0].address", "address 10.0.0.1:22 is already used by m1"},
		{"master listed twice", head + m1 + "  - name: m1\n    address: 10.0.0.1\n", nil, 7, "masters[1]", `host "m1" is listed twice in masters`},
		{"master also a worker", head + m1 + "workers:\n  - name: m1\n    address: 10.0.0.1\n", nil, 8, "workers[0]", `listed both as a master`},
		{"duplicate internal address", head + "masters:\n  - {name: m1, address: 192.0.2.1, internalAddress: 10.0.0.1}\n  - {name: m2, address: 192.0.2.2, internalAddress: 10.0.0.1}\ncontrolPlaneEndpoint: lb:6443\n", nil, 6, "masters[1].internalAddress", "internal address 10.0.0.1 is already used by m1"},
		{"VIP not IPv4", head + "controlPlaneVIP: fd00::10\n" + m1 + "  - name: m2\n    address: 10.0.0.2\n", nil, 4, "controlPlaneVIP", `"fd00::10" is not an IPv4 address`},
		{"VIP with one master", head + "controlPlaneVIP: 10.0.0.50\n" + m1, nil, 4, "controlPlaneVIP", "a virtual IP moves between masters; the inventory lists 1"},
		{"VIP and a load balancer", head + "controlPlaneVIP: 10.0.0.50\ncontrolPlaneEndpoint: lb:6443\n" + m1 + "  - name: m2\n    address: 10.0.0.2\n", nil, 4, "controlPlaneVIP", "a load balancer (controlPlaneEndpoint lb:6443) or a virtual IP, not both"},
		{"VIP is a host's address", head + "controlPlaneVIP: 10.0.0.2\n" + m1 + "  - name: m2\n    address: 10.0.0.2\n", nil, 4, "controlPlaneVIP", "10.0.0.2 is the address of host m2"},
		{"API proxy on the API server's port", head + "apiProxy:\n  port: 6443\n" + m1 + "  - name: m2\n    address: 10.0.0.2\n", nil, 5, "apiProxy.port", "port 6443 cannot be used"},
		{"endpoint bad port", head + "controlPlaneEndpoint: lb.example.com:99999\n" + m1, nil, 4, "controlPlaneEndpoint", "not a valid host:port"},
		{"version unparseable", head + "kubernetesVersion: latest\n" + m1, nil, 4, "kubernetesVersion", `"latest" is not a Kubernetes version; write it as v1.36.3`},
		{"version unsupported", head + "kubernetesVersion: v1.29.0\n" + m1, nil, 4, "kubernetesVersion", "Kubernetes v1.29.0 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{"version of another major", head + "kubernetesVersion: v2.36.0\n" + m1, nil, 4, "kubernetesVersion", "Kubernetes v2.36.0 is not supported by this kforge; use v1.35.x, v1.36.x or v1.37.x (default v1.36.3)"},
		{"pod subnet not a CIDR", head + "networking:\n  podSubnet: 10.244.0.0\n" + m1, nil, 5, "networking.podSubnet", `"10.244.0.0" is not a CIDR`},
		{"pod subnet host bits", head + "networking:\n  podSubnet: 10.244.1.0/16\n" + m1, nil, 5, "networking.podSubnet", "did you mean 10.244.0.0/16"},
		{"subnets overlap", head + "networking:\n  podSubnet: 10.0.0.0/8\n  serviceSubnet: 10.96.0.0/12\n" + "masters:\n  - name: m1\n    address: 192.168.0.1\n", nil, 6, "networking.serviceSubnet", "overlaps podSubnet 10.0.0.0/8"},
		{"dual-stack pod subnet without the service one", head + "networking:\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56\n" + dual6, nil, 4, "networking.serviceSubnet", "podSubnet is dual-stack (IPv4 and IPv6) but serviceSubnet has only IPv4"},
		{"dual-stack service subnet without the pod one", head + "networking:\n  serviceSubnet: 10.96.0.0/12,fd00:10:96::/112\n" + dual6, nil, 4, "networking.podSubnet", "serviceSubnet is dual-stack (IPv4 and IPv6) but podSubnet has only IPv4"},
		{"dual-stack IPv6 first", head + "networking:\n  podSubnet: fd00:10:244::/56,10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12,fd00:10:96::/112\n" + dual6, nil, 5, "networking.podSubnet", "one IPv4 range followed by one IPv6 range"},
		{"dual-stack three ranges", head + "networking:\n  podSubnet: 10.244.0.0/16,fd00:10:244::/56,10.245.0.0/16\n" + m1, nil, 5, "networking.podSubnet", "3 ranges: at most two"},
		{"dual-stack IPv6 ranges overlap", head + "networking:\n  podSubnet: 10.244.0.0/16,fd00:10::/48\n  serviceSubnet: 10.96.0.0/12,fd00:10::/112\n" + dual6, nil, 6, "networking.serviceSubnet", "serviceSubnet fd00:10::/112 overlaps podSubnet fd00:10::/48"},
		{"dual-stack IPv6 service subnet too large", head + dualNet("fd00:10:96::/64") + dual6, nil, 6, "networking.serviceSubnet", "serviceSubnet fd00:10:96::/64 is too large"},
		{"dual-stack IPv6 mask does not fit", head + dualNet("fd00:10:96::/112") + "  nodeCIDRMaskSizeIPv6: 48\n" + dual6, nil, 7, "networking.nodeCIDRMaskSizeIPv6", "node CIDR mask /48 does not fit podSubnet fd00:10:244::/56"},
		{"dual-stack host without an IPv6 address", head + dualNet("fd00:10:96::/112") + m1, nil, 8, "masters[0].ipv6Address", "ipv6Address is required"},
		{"IPv6 address without dual-stack", head + dual6, nil, 7, "masters[0].ipv6Address", "ipv6Address is set but the cluster is not dual-stack"},
		{"IPv6 address not IPv6", head + dualNet("fd00:10:96::/112") + "masters:\n  - name: m1\n    address: 10.0.0.1\n    ipv6Address: 10.0.0.9\n", nil, 10, "masters[0].ipv6Address", `"10.0.0.9" is not an IPv6 address`},
		{"IPv6 address inside the pod subnet", head + dualNet("fd00:10:96::/112") + "masters:\n  - name: m1\n    address: 10.0.0.1\n    ipv6Address: fd00:10:244::9\n", nil, 10, "masters[0].ipv6Address", "node address fd00:10:244::9 lies inside podSubnet fd00:10:244::/56"},
		{"two etcd hosts", head + m1 + "etcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n", nil, 7, "etcd", "2 etcd members tolerate (N-1)/2 = 0 failures, as 1 do"},
		{"one etcd host", head + m1 + "etcd:\n  - {name: e1, address: 10.0.0.11}\n", nil, 7, "etcd", "one external etcd member tolerates no failure"},
		{"nine etcd hosts", head + m1 + "etcd:\n" + "  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n  - {name: e4, address: 10.0.0.14}\n  - {name: e5, address: 10.0.0.15}\n  - {name: e6, address: 10.0.0.16}\n  - {name: e7, address: 10.0.0.17}\n  - {name: e8, address: 10.0.0.18}\n  - {name: e9, address: 10.0.0.19}\n", nil, 7, "etcd", "etcd advises at most 7"},
		{"etcd host also a master", head + m1 + "etcd:\n  - {name: m1, address: 10.0.0.1}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n", nil, 8, "etcd[0]", `host "m1" is listed both as a master`},
		{"etcd host with labels", head + m1 + "etcd:\n  - {name: e1, address: 10.0.0.11}\n  - {name: e2, address: 10.0.0.12}\n  - name: e3\n    address: 10.0.0.13\n    labels: {disk: ssd}\n", nil, 12, "etcd[2].labels", "labels on an etcd host"},
		{"etcd host with an IPv6 address", head + dualNet("fd00:10:96::/112") + dual6 + "etcd:\n  - {name: e1, address: 10.0.0.11, ipv6Address: 2001:db8::11}\n  - {name: e2, address: 10.0.0.12}\n  - {name: e3, address: 10.0.0.13}\n", nil, 12, "etcd[0].ipv6Address", "an etcd host needs no IPv6 address"},
		{"IPv6 address used twice", head + dualNet("fd00:10:96::/112") + dual6 + "  - name: m2\n    address: 10.0.0.2\n    ipv6Address: 2001:db8::1\n", nil, 13, "masters[1].ipv6Address", "IPv6 address 2001:db8::1 is already used by m1"},
		{"service subnet too large", head + "networking:\n  serviceSubnet: 172.0.0.0/8\n" + m1, nil, 5, "networking.serviceSubnet", "too large"},
		{"node inside pod subnet", head + "networking:\n  podSubnet: 10.0.0.0/16\n" + m1, nil, 8, "masters[0].address", "lies inside podSubnet 10.0.0.0/16"},
		{"node mask does not fit", head + "networking:\n  nodeCIDRMaskSize: 8\n" + m1, nil, 5, "networking.nodeCIDRMaskSize", "does not fit podSubnet"},
		{"mask not a number", head + "networking:\n  nodeCIDRMaskSize: big\n" + m1, nil, 5, "networking.nodeCIDRMaskSize", `want a number, got "big"`},
		{"dns domain", head + "networking:\n  dnsDomain: -bad-\n" + m1, nil, 5, "networking.dnsDomain", "not a valid DNS domain"},
		{"unknown plugin", head + "networking:\n  plugin: calico\n" + m1, nil, 5, "networking.plugin", `unknown pod network plugin "calico"`},
		{"unknown network policy setting", head + "networking:\n  networkPolicy: calico\n" + m1, nil, 5, "networking.networkPolicy", `unknown NetworkPolicy setting "calico"`},
		{"admin network policy without the agent", head + "networking:\n  networkPolicy: off\n  adminNetworkPolicy: true\n" + m1, nil, 6, "networking.adminNetworkPolicy", "needs the NetworkPolicy agent"},
		{"unknown key algorithm", head + "pki:\n  keyAlgorithm: dsa\n" + m1, nil, 5, "pki.keyAlgorithm", `unknown key algorithm "dsa"`},
		{"bad validity", head + "pki:\n  certValidity: 1y\n" + m1, nil, 5, "pki.certValidity", "not a duration"},
		{"cert outlives CA", head + "pki:\n  certValidity: 4000d\n  caValidity: 3650d\n" + m1, nil, 5, "pki.certValidity", "cannot outlive its CA"},
		{"bad SAN", head + "pki:\n  apiServerCertSANs: [ok.example.com, 'not a name']\n" + m1, nil, 5, "pki.apiServerCertSANs[1]", "not an IP address or DNS name"},
		{"external CA without key", head + "pki:\n  externalCA:\n    cert: ca.crt\n" + m1, nil, 5, "pki.externalCA.key", "key is required"},
		{"ssh port out of range", head + "ssh:\n  port: 70000\n" + m1, nil, 5, "ssh.port", "port 70000 is out of range"},
		{"secret instead of env name", head + "ssh:\n  sudo: password\n  sudoPasswordEnv: hunter2!\n" + m1, nil, 6, "ssh.sudoPasswordEnv", "not an environment variable name"},
		{"sudo password without env", head + "ssh:\n  sudo: password\n" + m1, nil, 4, "ssh.sudoPasswordEnv", "sudo: password needs sudoPasswordEnv"},
		{"unknown sudo mode", head + "ssh:\n  sudo: doas\n" + m1, nil, 5, "ssh.sudo", `unknown sudo mode "doas"`},
		{"bad pinned host key", head + m1 + "    ssh:\n      hostKey: ssh-ed25519 AAAA\n", nil, 8, "masters[0].ssh.hostKey", "not an SSH public key"},
		{"bastion bad address", head + "ssh:\n  bastions:\n    - address: 'bastion:'\n" + m1, nil, 6, "ssh.bastions[0].address", "not a valid address"},
		{"agent not a bool", head + "ssh:\n  agent: yes\n" + m1, nil, 5, "ssh.agent", `want true or false, got "yes"`},
		{"bad label key", head + m1 + "    labels:\n      'example.com/a/b': x\n", nil, 8, "masters[0].labels.example.com/a/b", "invalid name part"},
		{"bad label value", head + m1 + "    labels:\n      tier: 'has space'\n", nil, 8, "masters[0].labels.tier", `label value "has space" is not valid`},
		{"bad taint effect", head + m1 + "    taints:\n      - {key: gpu, effect: NoWay}\n", nil, 8, "masters[0].taints[0].effect", `unknown taint effect "NoWay"`},
		{"kubelet flag with dashes", head + "kubelet:\n  extraArgs:\n    --max-pods: '10'\n" + m1, nil, 6, "kubelet.extraArgs.--max-pods", "leading dashes"},
		{"unknown cgroup driver", head + "kubelet:\n  cgroupDriver: cgroupv2\n" + m1, nil, 5, "kubelet.cgroupDriver", `unknown cgroup driver "cgroupv2"`},
		{"unknown firewall setting", head + "firewall: disable\n" + m1, nil, 4, "firewall", `unknown firewall setting "disable"`},
		{"unknown kube-proxy mode", head + "kubeProxy:\n  mode: ipvs\n" + m1, nil, 5, "kubeProxy.mode", `unknown kube-proxy mode "ipvs"`},
		{"negative conntrack", head + "kubeProxy:\n  conntrackMaxPerCore: -1\n" + m1, nil, 5, "kubeProxy.conntrackMaxPerCore", `-1 is negative`},
		{"runtime endpoint not unix", head + "containerRuntime:\n  endpoint: tcp://x:1\n" + m1, nil, 5, "containerRuntime.endpoint", "not a unix socket URL"},
		{"runtime from a bundle without one", head + "containerRuntime:\n  install: bundle\n" + m1, nil, 5, "containerRuntime.install", "no bundle is set"},
		{"unknown runtime source", head + "containerRuntime:\n  install: apt\n" + m1, nil, 5, "containerRuntime.install", `unknown runtime source "apt"`},
		{"registry CA missing", head + "bundle: /b\ncontainerRuntime:\n  registries:\n    - host: registry.k8s.io\n      caFile: nope/ca.crt\n" + m1, nil, 8, "containerRuntime.registries[0].caFile", "cannot read nope/ca.crt"},
		{"registry password unset", head + "bundle: /b\ncontainerRuntime:\n  registries:\n    - host: registry.k8s.io\n      usernameEnv: MIRROR_USER\n      passwordEnv: MIRROR_PASSWORD\n" + m1, map[string]string{"MIRROR_USER": "u"}, 9, "containerRuntime.registries[0].passwordEnv", "environment variable MIRROR_PASSWORD is not set"},
		{"registry mirror not a URL", head + "bundle: /b\ncontainerRuntime:\n  registries:\n    - host: registry.k8s.io\n      mirrors: [mirror.lab:5000]\n" + m1, nil, 8, "containerRuntime.registries[0].mirrors[0]", `"mirror.lab:5000" is not a mirror URL`},
		{"registries with the host's runtime", head + "containerRuntime:\n  install: host\n  registries:\n    - host: docker.io\n" + m1, nil, 6, "containerRuntime.registries", "for the containerd kforge installs"},
		{"env var unset", head + "masters:\n  - name: m1\n    address: ${M1_ADDR}\n", nil, 6, "masters[0].address", "environment variable M1_ADDR is not set"},
		{"env var unclosed", head + "masters:\n  - name: m1\n    address: ${M1_ADDR\n", nil, 6, "masters[0].address", "unclosed"},
		{"env substitution gives bad port", head + "ssh:\n  port: ${P}\n" + m1, map[string]string{"P": "twenty"}, 5, "ssh.port", `want a number, got "twenty"`},
		{"local volumes without a bundle", head + "localVolumes:\n  enabled: true\n" + m1, nil, 5, "localVolumes.enabled", "kforge's helper image, which only the bundle has, but no bundle is set"},
		{"local volumes' path relative", head + "localVolumes:\n  path: data/volumes\n" + m1, nil, 5, "localVolumes.path", `"data/volumes" is not an absolute path`},
		{"local volumes' path not clean", head + "localVolumes:\n  path: /data/../volumes/\n" + m1, nil, 5, "localVolumes.path", `"/data/../volumes/" is not a clean path; write it as /volumes`},
		{"local volumes on /", head + "localVolumes:\n  path: /\n" + m1, nil, 5, "localVolumes.path", "the volumes cannot be / itself"},
		{"local volumes where reset removes", head + "localVolumes:\n  path: /var/lib/kubelet/volumes\n" + m1, nil, 5, "localVolumes.path", "/var/lib/kubelet/volumes is kforge's: kforge reset removes /var/lib/kubelet"},
		{"addon without path", head + m1 + "addons:\n  - {}\n", nil, 8, "addons[0].path", "path is required"},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.doc), env(tc.env))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("want inventory.Errors, got %v", err)
			}
			for _, e := range es {
				if e.Line == tc.line && e.Field == tc.field && strings.Contains(e.Error(), tc.msg) {
					if !strings.HasPrefix(e.Error(), "bad.yaml:") {
						t.Errorf("error does not start with the file name: %q", e.Error())
					}
					return
				}
			}
			t.Errorf("want line %d field %q msg ~%q; got:\n%v", tc.line, tc.field, tc.msg, err)
		})
	}
}
