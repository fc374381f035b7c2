// Command kforge creates, grows, upgrades, backs up, restores and resets Kubernetes clusters,
// and renews their certificates, from a workstation by driving ordinary Linux hosts over SSH.
// This file only builds the command line and turns errors into exit codes; all work happens in
// the packages.
package main

import "os"

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// CLI is the whole command line. Commands arrive here as they become real.
type CLI struct {
	Globals

	Version    VersionCmd    `cmd:"" help:"Print kforge's version, the Kubernetes version it installs by default and the minors it supports."`
	Inventory  InventoryCmd  `cmd:"" help:"Validate the inventory or print its schema."`
	Plan       PlanCmd       `cmd:"" help:"Show what apply would change (files with a diff, uploads, restarts, nodes, API objects), read from the hosts and the API without changing anything; --offline prints apply's steps instead."`
	Apply      ApplyCmd      `cmd:"" help:"Create the cluster in the inventory, or bring an existing one up to date with it: grow it, upgrade it to a higher kubernetesVersion, remove the hosts that left the inventory (--prune)."`
	Kubeconfig KubeconfigCmd `cmd:"" help:"Print the cluster's admin kubeconfig, or merge it into ~/.kube/config; with --user, sign one for a person or a CI job."`
	Certs      CertsCmd      `cmd:"" help:"Check, renew and rotate the cluster's certificates."`
	Etcd       EtcdCmd       `cmd:"" help:"Back up the cluster's etcd (snapshots) and show its status."`
	Secrets    SecretsCmd    `cmd:"" help:"Rotate the key that encrypts the cluster's Secrets in etcd."`
	CIS        CISCmd        `cmd:"" name:"cis" help:"Run the CIS Kubernetes Benchmark's automated checks (v1.12: master, etcd, control plane and node) on every host, and print each check's result. Exits 1 when a scored check fails that kforge does not fail on purpose (docs/security.md)."`
	Restore    RestoreCmd    `cmd:"" help:"Rebuild the control plane from an etcd snapshot on the inventory's masters or etcd hosts (new hosts allowed); workers come back without re-joining."`
	Reset      ResetCmd      `cmd:"" help:"Undo on every host what apply did (kubelet, containers, files, pod network, iptables rules); asks first unless --yes."`
	Bundle     BundleCmd     `cmd:"" help:"Build and verify offline bundles: Kubernetes binaries and images for hosts without internet."`
	Lab        LabCmd        `cmd:"" help:"A local fleet of systemd hosts reachable over SSH, for trying kforge and for its tests."`
	Controller ControllerCmd `cmd:"" help:"Run kforge as a controller in a management cluster: KforgeCluster objects, each a cluster made and kept by plan and apply, their state in the management cluster."`
	Render     RenderCmd     `cmd:"" help:"Write every file kforge would put on each host (PKI, kubeconfigs, manifests, kubelet, containerd) and the admin kubeconfig into a directory."`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
