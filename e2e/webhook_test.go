package e2e

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
)

// checkServiceWebhook runs the agent as a validating admission webhook on node, behind a
// Service, and registers it for ConfigMaps labelled kforge.test/webhook. The API server (host
// network, on a master) calls it through the Service's address, which works only where the
// kernel routes the service subnet: the lab's hosts have no default route, so this passes only
// with kforge's service route. A labelled ConfigMap is denied with the webhook's message,
// another is allowed, and the webhook's log shows both calls. With the route's unit stopped on
// the (only) master, the API server cannot reach the webhook: the route is what makes it work.
func (c *cluster) checkServiceWebhook(ctx context.Context, wl workload, master, node string) {
	t := c.t
	t.Helper()
	k := c.client()
	const ns, name = "default", "webhook"
	now := time.Now()
	ca, err := pki.Issue(pki.Request{Spec: pki.Spec{Name: "webhook-ca"}, Subject: pkix.Name{CommonName: "kforge e2e webhook CA"}},
		nil, pki.DefaultKeyAlgorithm, now, time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	host := name + "." + ns + ".svc"
	serving, err := pki.Issue(pki.Request{
		Spec:    pki.Spec{Name: name, SignedBy: "webhook-ca", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
		Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
	}, ca, pki.DefaultKeyAlgorithm, now, time.Hour, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.EncodeKey(serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: pki.EncodeCert(serving.Cert), corev1.TLSPrivateKeyKey: key},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "agent", Image: wl.image, ImagePullPolicy: wl.pull,
				Args:         []string{"webhook", "/tls/tls.crt", "/tls/tls.key"},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name + "-tls"}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kforge-e2e"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "configmaps.kforge.test",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: name, Path: ptr.To("/validate")},
				CABundle: pki.EncodeCert(ca.Cert),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kforge.test/webhook", Operator: metav1.LabelSelectorOpExists}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.WithoutCancel(ctx), "kforge-e2e", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the webhook configuration: %v", err)
		}
	}()

	configMap := func(name, verdict string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kforge.test/webhook": verdict}}}
	}
	// Until the pod runs and kube-proxy has its endpoint, the call fails (failurePolicy Fail):
	// retry until the webhook itself answers, and keep the last error to show.
	start := time.Now()
	var last error
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = k.CoreV1().ConfigMaps(ns).Create(ctx, configMap("webhook-denied", "deny"), metav1.CreateOptions{})
		return last != nil && strings.Contains(last.Error(), "denied by the e2e webhook"), nil
	})
	if err != nil {
		logs, _ := c.kubectl(ctx, "logs", name)
		t.Fatalf("the API server never got the webhook's answer through its Service: last error %v\nwebhook log:\n%s", last, logs)
	}
	t.Logf("webhook behind a Service answered the API server %s after it was registered: %v", time.Since(start).Round(time.Second), last)
	if _, err := k.CoreV1().ConfigMaps(ns).Create(ctx, configMap("webhook-allowed", "allow"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a ConfigMap the webhook allows: %v", err)
	}
	logs, err := c.kubectl(ctx, "logs", name)
	if err != nil || !strings.Contains(logs, "ConfigMap webhook-denied allowed=false") || !strings.Contains(logs, "ConfigMap webhook-allowed allowed=true") {
		t.Errorf("webhook log: %v\n%s", err, logs)
	}

	unit := hostpath.ServiceRouteUnit
	c.exec(ctx, master, "systemctl stop "+unit)
	route := c.exec(ctx, master, "ip route show "+inventory.DefaultServiceSubnet)
	_, err = k.CoreV1().ConfigMaps(ns).Create(ctx, configMap("webhook-unrouted", "allow"), metav1.CreateOptions{})
	c.exec(ctx, master, "systemctl start "+unit)
	// A new connection fails at once (network is unreachable); one the API server kept alive
	// from before times out.
	if route != "" || err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("with %s stopped on %s (routes left: %q), the API server called the webhook: %v", unit, master, route, err)
	} else {
		t.Logf("with %s stopped on %s: %v", unit, master, err)
	}
	if logs, _ := c.kubectl(ctx, "logs", name); strings.Contains(logs, "webhook-unrouted") {
		t.Errorf("the webhook saw webhook-unrouted while %s was stopped:\n%s", unit, logs)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := k.CoreV1().ConfigMaps(ns).Create(ctx, configMap("webhook-routed-again", "allow"), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("with %s started again on %s, the webhook is not reached: %v", unit, master, err)
	}
}
