package templates

import (
	"fmt"

	"github.com/kforge/kforge/release"
)

// kubeadmMinor is what kubeadm of one Kubernetes minor renders differently from kubeadm of the
// others, for the files this package renders. Each field is one such difference, read from
// kubeadm's source of that minor (k8s.io/kubernetes/cmd/kubeadm); the static pods and kubelet
// files read these fields and never the minor itself. Where kforge deliberately renders a
// minor otherwise than its kubeadm, docs/kubeadm-differences.md says so and why.
type kubeadmMinor struct {
	// FlexVolumeDir is the FlexVolume plugin directory kubeadm mounts read-write into
	// kube-controller-manager (phases/controlplane/volumes.go, volume "flexvolume-dir"); ""
	// when it mounts none. kubeadm v1.36 no longer mounts it (a FlexVolume driver that needs
	// the controller manager to see it is mounted through the ClusterConfiguration's
	// controllerManager.extraVolumes instead).
	FlexVolumeDir string
}

// kubeadmMinors has one row per minor of the release catalogue (release.Supported);
// TestEveryMinorHasARow keeps them in step. Comparing kubeadm v1.35.4, v1.36.3 and v1.37.2
// (`diff -r` of cmd/kubeadm/app, phases controlplane, etcd, kubelet, certs, kubeconfig,
// addons; util/staticpod; componentconfigs) found no other difference in these files: etcd's
// flags are the same for etcd 3.6 and 3.7 (phases/etcd/local.go: kubeadm v1.36 dropped its
// branch for etcd before 3.6, which none of these minors runs), and the kubelet files differ
// only where NodeLocalCRISocket is off, which it never is here (beta and on in v1.35, GA from
// v1.36). Images and versions are the catalogue's columns, not rows here.
var kubeadmMinors = map[string]kubeadmMinor{
	"v1.35": {FlexVolumeDir: "/usr/libexec/kubernetes/kubelet-plugins/volume/exec"},
	"v1.36": {},
	"v1.37": {},
}

// minorOf is kubeadm's rendering row for release r.
func minorOf(r release.Release) (kubeadmMinor, error) {
	m, ok := kubeadmMinors[r.Minor]
	if !ok {
		return kubeadmMinor{}, fmt.Errorf("templates: kubeadm %s's rendering is not described (templates/minors.go has no row for %s)", r.Kubernetes, r.Minor)
	}
	return m, nil
}
