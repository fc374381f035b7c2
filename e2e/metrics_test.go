package e2e

import (
	"context"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// checkMetrics: metrics-server answers with no setting. `kubectl top nodes` has a line with
// figures for every node, `kubectl top pods` for kube-system's pods. A HorizontalPodAutoscaler
// (1 to 3 replicas at 50% of a 100m CPU request) scales a Deployment up under load, a client
// asking each replica for 40 ms of CPU work every 100 ms, and back to 1 when the load stops
// (no scale-down stabilization window, so that the test waits for the HPA, not for a timer).
func (c *cluster) checkMetrics(ctx context.Context, wl workload, nodes []string) {
	t := c.t
	t.Helper()
	start := time.Now()
	var out string
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.kubectl(ctx, "top", "nodes", "--no-headers")
		if err != nil {
			return false, nil
		}
		for _, n := range nodes {
			if !strings.Contains(out, n+" ") {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("kubectl top nodes does not list every node (%v) within 4 minutes: %v\n%s", nodes, err, out)
	}
	t.Logf("kubectl top nodes answered for %d nodes after %s:\n%s", len(nodes), time.Since(start).Round(time.Second), out)
	if out, err := c.kubectl(ctx, "top", "pods", "-n", "kube-system", "--no-headers"); err != nil || !strings.Contains(out, "kube-apiserver-") {
		t.Errorf("kubectl top pods -n kube-system: %v\n%s", err, out)
	}

	k := c.client()
	labels := map[string]string{"app": "burner"}
	if _, err := k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burner"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
					Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull, Args: []string{"serve"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "burner"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AutoscalingV2().HorizontalPodAutoscalers("default").Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "burner"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "burner"},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    3,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](50)},
			}}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0)}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		bg := context.Background()
		k.AutoscalingV2().HorizontalPodAutoscalers("default").Delete(bg, "burner", metav1.DeleteOptions{})
		k.AppsV1().Deployments("default").Delete(bg, "burner", metav1.DeleteOptions{})
		k.CoreV1().Services("default").Delete(bg, "burner", metav1.DeleteOptions{})
	}()
	replicas := func(want int32, within time.Duration) {
		t.Helper()
		start := time.Now()
		var got int32
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Second, within, true, func(ctx context.Context) (bool, error) {
			d, err := k.AppsV1().Deployments("default").Get(ctx, "burner", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = d.Status.ReadyReplicas
			return *d.Spec.Replicas == want && got == want, nil
		}); err != nil {
			hpa, _ := c.kubectl(ctx, "describe", "hpa", "burner")
			t.Fatalf("burner has %d ready replicas; want %d within %s\n%s", got, want, within, hpa)
		}
		t.Logf("burner at %d replicas after %s", want, time.Since(start).Round(time.Second))
	}
	replicas(1, 2*time.Minute)
	if _, err := k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "load"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: new(int64), Containers: []corev1.Container{{
			Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull, Args: []string{"probe", "http://burner.default.svc.cluster.local/burn?ms=40"},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas(3, 4*time.Minute)
	if err := k.CoreV1().Pods("default").Delete(ctx, "load", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas(1, 4*time.Minute)
}
