package e2e

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
)

// localVolume is a claim on the cluster's default StorageClass, the node its volume is on, and
// what the first pod that used it wrote there.
type localVolume struct {
	c    *cluster
	wl   workload
	name string // the claim's, and the first part of its pods' names
	node string
	text string
	dir  string // the volume's directory on node
}

// volumeFile is the file the test's pods write and read, in the volume mounted at /data.
const volumeFile = "/data/kforge-e2e"

// checkLocalVolumes (localVolumes.enabled): a claim naming no StorageClass is served by the
// default one, local-path, on node, where a pod writes into it; deleted and made again on the
// node, the pod reads the same; the claim deleted, the provisioner's helper removes the volume's
// directory from the host.
func (c *cluster) checkLocalVolumes(ctx context.Context, wl workload, node string) {
	v := c.writeLocalVolume(ctx, wl, "e2e-data", node)
	v.read(ctx, "after the pod that wrote it was deleted")
	v.remove(ctx)
}

// writeLocalVolume makes claim name with no storageClassName and a pod pinned to node that
// writes a text of its own into it; then checks that the claim got the default class and is
// bound, that its PersistentVolume's node affinity names node, and that the text is in the
// volume's directory, under localVolumes.path, on the host.
func (c *cluster) writeLocalVolume(ctx context.Context, wl workload, name, node string) *localVolume {
	t := c.t
	t.Helper()
	k := c.client()
	if _, err := k.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	v := &localVolume{c: c, wl: wl, name: name, node: node, text: fmt.Sprintf("written by %s-writer on %s at %s", name, node, time.Now().UTC().Format(time.RFC3339Nano))}
	start := time.Now()
	if out := v.runPod(ctx, name+"-writer", "write", volumeFile, v.text); !strings.HasPrefix(out, "wrote ") {
		t.Fatalf("%s-writer on %s said %q", name, node, out)
	}
	t.Logf("claim %s bound and written on %s in %s", name, node, time.Since(start).Round(time.Second))

	pvc, err := k.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != kube.LocalPathStorageClass {
		t.Fatalf("claim %s: %s, class %v; want Bound by the default class %s", name, pvc.Status.Phase, pvc.Spec.StorageClassName, kube.LocalPathStorageClass)
	}
	pv, err := k.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	if a := pv.Spec.NodeAffinity; a != nil && a.Required != nil {
		for _, term := range a.Required.NodeSelectorTerms {
			for _, e := range term.MatchExpressions {
				if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn {
					nodes = append(nodes, e.Values...)
				}
			}
		}
	}
	if !slices.Equal(nodes, []string{v.hostname(ctx)}) || pv.Spec.HostPath == nil {
		t.Fatalf("PersistentVolume %s of claim %s: node affinity %+v, source %+v; want a directory on %s alone", pv.Name, name, pv.Spec.NodeAffinity, pv.Spec.PersistentVolumeSource, node)
	}
	v.dir = pv.Spec.HostPath.Path
	if path.Dir(v.dir) != inventory.DefaultLocalVolumesPath {
		t.Errorf("volume %s is at %s; want it in localVolumes.path, %s", pv.Name, v.dir, inventory.DefaultLocalVolumesPath)
	}
	// On the host itself: the directory the helper made (0777, as upstream's setup), holding
	// what the pod wrote.
	if got := c.exec(ctx, node, "stat -c %a "+v.dir+" && cat "+v.dir+"/"+path.Base(volumeFile)); got != "777\n"+v.text {
		t.Errorf("%s on %s: %q; want mode 777 and %q", v.dir, node, got, v.text)
	}
	return v
}

// read runs a new pod on the volume's node that reads what the first pod wrote.
func (v *localVolume) read(ctx context.Context, when string) {
	t := v.c.t
	t.Helper()
	start := time.Now()
	if got := v.runPod(ctx, v.name+"-reader", "cat", volumeFile); got != v.text {
		t.Errorf("claim %s read on %s %s: %q; want %q", v.name, v.node, when, got, v.text)
		return
	}
	t.Logf("claim %s read on %s %s, in %s", v.name, v.node, when, time.Since(start).Round(time.Second))
}

// remove deletes the claim: its PersistentVolume goes (reclaim policy Delete), and the
// provisioner's helper removes the volume's directory from the host.
func (v *localVolume) remove(ctx context.Context) {
	c, t := v.c, v.c.t
	t.Helper()
	k := c.client()
	pvc, err := k.CoreV1().PersistentVolumeClaims("default").Get(ctx, v.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.CoreV1().PersistentVolumeClaims("default").Delete(ctx, v.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var left string
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := k.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = "PersistentVolume " + pvc.Spec.VolumeName
			return false, nil
		}
		left = strings.TrimSpace(c.exec(ctx, v.node, "test -e "+v.dir+" && echo "+v.dir+"; true"))
		return left == "", nil
	}); err != nil {
		logs, _ := c.kubectl(ctx, "logs", "-n", kube.LocalPathNamespace, "deploy/"+kube.LocalPathName, "--tail", "30")
		t.Fatalf("claim %s deleted: %s still there after 3 minutes: %v\nthe provisioner's log:\n%s", v.name, left, err, logs)
	}
	t.Logf("claim %s deleted: its volume and %s on %s gone in %s", v.name, v.dir, v.node, time.Since(start).Round(time.Second))
}

// hostname is the kubernetes.io/hostname label of the volume's node, which local volumes' node
// affinity names and the test's pods select.
func (v *localVolume) hostname(ctx context.Context) string {
	v.c.t.Helper()
	n, err := v.c.client().CoreV1().Nodes().Get(ctx, v.node, metav1.GetOptions{})
	if err != nil {
		v.c.t.Fatal(err)
	}
	return n.Labels[corev1.LabelHostname]
}

// runPod runs the agent with args in a pod that mounts the claim at /data, on the volume's node,
// until it succeeds, and returns its output; the pod is deleted, and gone, before it returns.
// The node is chosen by a nodeSelector, not nodeName: the scheduler must see the pod, or a
// claim of a WaitForFirstConsumer class is never given a node to be made on.
func (v *localVolume) runPod(ctx context.Context, name string, args ...string) string {
	c, t := v.c, v.c.t
	t.Helper()
	k := c.client()
	if _, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: new(int64),
			NodeSelector:                  map[string]string{corev1.LabelHostname: v.hostname(ctx)},
			Containers: []corev1.Container{{
				Name: "agent", Image: v.wl.image, ImagePullPolicy: v.wl.pull, Args: args,
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: path.Dir(volumeFile)}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.name},
			}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", name, err)
			return
		}
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := k.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("pod %s not gone 2 minutes after its deletion: %v", name, err)
		}
	}()
	var p *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = k.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	}); err != nil || p.Status.Phase != corev1.PodSucceeded {
		pvc, _ := c.kubectl(ctx, "describe", "pvc", v.name)
		pod, _ := c.kubectl(ctx, "describe", "pod", name)
		out, _ := c.kubectl(ctx, "logs", name)
		logs, _ := c.kubectl(ctx, "logs", "-n", kube.LocalPathNamespace, "deploy/"+kube.LocalPathName, "--tail", "30")
		t.Fatalf("pod %s (%s) on %s did not succeed within 3 minutes: %v\n%s\n%s\nits log: %s\nthe provisioner's log:\n%s", name, strings.Join(args, " "), v.node, err, pod, pvc, out, logs)
	}
	if p.Spec.NodeName != v.node {
		t.Errorf("pod %s ran on %s; want %s, where the volume is", name, p.Spec.NodeName, v.node)
	}
	b, err := k.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("the log of pod %s: %v", name, err)
	}
	return string(b)
}
