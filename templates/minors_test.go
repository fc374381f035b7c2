package templates

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kforge/kforge/release"
)

func TestEveryMinorHasARow(t *testing.T) {
	for _, m := range release.Supported() {
		if _, ok := kubeadmMinors[m]; !ok {
			t.Errorf("release catalogue minor %s has no row in kubeadmMinors (templates/minors.go): read its kubeadm's source and add one", m)
		}
	}
	for m := range kubeadmMinors {
		if !slices.Contains(release.Supported(), m) {
			t.Errorf("kubeadmMinors has a row for %s, which the release catalogue does not support", m)
		}
	}
}

// TestMinorsDifferOnlyAsTheTableSays renders the same cluster at each supported minor: the
// static pods differ only in their images and in what kubeadmMinors lists, and the kubelet
// files not at all.
func TestMinorsDifferOnlyAsTheTableSays(t *testing.T) {
	pods := map[string]map[string]*corev1.Pod{}
	kubelet := map[string][]byte{}
	for _, m := range release.Supported() {
		c := haCluster()
		r, err := release.For(m + ".0")
		if err != nil {
			t.Fatal(err)
		}
		if c, err = c.AtVersion(r.Kubernetes); err != nil {
			t.Fatal(err)
		}
		cp, err := ControlPlaneFor(c, 0, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want := r.Images(""); cp.Images != want {
			t.Errorf("%s: images %+v, want the catalogue's %+v", m, cp.Images, want)
		}
		ps := cp.StaticPods()
		for name, p := range ps {
			for i := range p.Spec.Containers {
				p.Spec.Containers[i].Image = "" // the catalogue's, checked above
			}
			ps[name] = p
		}
		pods[m] = ps
		k, err := KubeletFor(c, c.Nodes()[0], Options{}).ConfigYAML()
		if err != nil {
			t.Fatal(err)
		}
		kubelet[m] = append(k, KubeletFor(c, c.Nodes()[0], Options{}).FlagsEnv()...)
	}

	flex := func(p *corev1.Pod) (corev1.Volume, corev1.VolumeMount, bool) {
		for i, v := range p.Spec.Volumes {
			if v.Name == "flexvolume-dir" {
				return v, p.Spec.Containers[0].VolumeMounts[i], true
			}
		}
		return corev1.Volume{}, corev1.VolumeMount{}, false
	}
	for _, m := range release.Supported() {
		kcm := pods[m]["kube-controller-manager.yaml"]
		v, vm, ok := flex(kcm)
		want := kubeadmMinors[m].FlexVolumeDir
		switch {
		case want == "" && ok:
			t.Errorf("%s: kube-controller-manager mounts flexvolume-dir; kubeadm %s does not", m, m)
		case want != "" && !ok:
			t.Errorf("%s: kube-controller-manager lacks the flexvolume-dir mount kubeadm %s has", m, m)
		case ok:
			dirOrCreate := corev1.HostPathDirectoryOrCreate
			if v.HostPath == nil || v.HostPath.Path != want || v.HostPath.Type == nil || *v.HostPath.Type != dirOrCreate ||
				vm.MountPath != want || vm.ReadOnly {
				t.Errorf("%s: flexvolume-dir is %+v mounted %+v; want %s, DirectoryOrCreate, read-write (FlexVolume drivers talk over sockets there)", m, v, vm, want)
			}
			// Without it the pod is v1.36's.
			kcm = kcm.DeepCopy()
			i := slices.IndexFunc(kcm.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "flexvolume-dir" })
			kcm.Spec.Volumes = slices.Delete(kcm.Spec.Volumes, i, i+1)
			kcm.Spec.Containers[0].VolumeMounts = slices.Delete(kcm.Spec.Containers[0].VolumeMounts, i, i+1)
		}
		if base := pods["v1.36"]["kube-controller-manager.yaml"]; !reflect.DeepEqual(kcm, base) {
			t.Errorf("%s: kube-controller-manager differs from v1.36's beyond kubeadmMinors", m)
		}
		for _, name := range []string{"etcd.yaml", "kube-apiserver.yaml", "kube-scheduler.yaml"} {
			if !reflect.DeepEqual(pods[m][name], pods["v1.36"][name]) {
				t.Errorf("%s: %s differs from v1.36's beyond its images", m, name)
			}
		}
		if string(kubelet[m]) != string(kubelet["v1.36"]) {
			t.Errorf("%s: kubelet files differ from v1.36's:\n%s\n---\n%s", m, kubelet[m], kubelet["v1.36"])
		}
	}
}

func TestAMinorWithoutARowIsAnError(t *testing.T) {
	_, err := minorOf(release.Release{Minor: "v1.99", Kubernetes: "v1.99.0"})
	if err == nil || err.Error() != "templates: kubeadm v1.99.0's rendering is not described (templates/minors.go has no row for v1.99)" {
		t.Errorf("minorOf(v1.99) = %v", err)
	}
}
