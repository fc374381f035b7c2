package kube

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kforge/kforge/pki"
)

// kubeletCSR creates, as client c, a kubelet client CSR for node (as the kubelet's TLS
// bootstrap does: ECDSA key, system:node:<name> in system:nodes) and returns it with its key.
func kubeletCSR(t *testing.T, c kubernetes.Interface, name, node string) (*certv1.CertificateSigningRequest, []byte) {
	t.Helper()
	key, err := pki.NewKey(pki.ECDSAP256, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := c.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CSR %s: %v", name, err)
	}
	return csr, keyPEM
}

// checkKubeletCSRs: a joining kubelet's CSR, posted with the bootstrap token, is approved and
// signed by SignKubeletCSRs, and the certificate logs in to the real API server as the node;
// requests for other nodes or from other users are left alone.
func checkKubeletCSRs(t *testing.T, cp *controlPlane, admin kubernetes.Interface, token BootstrapToken) {
	ctx := context.Background()
	tc := cp.token(t, token.ID+"."+token.Secret)
	_, key := kubeletCSR(t, tc, "csr-w2", "w2")
	kubeletCSR(t, tc, "csr-intruder", "intruder")
	kubeletCSR(t, admin, "csr-w2-by-admin", "w2")

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	changes, err := SignKubeletCSRs(sctx, admin, SignKubeletCSRsInput{
		Nodes: []string{"w2"}, Requestor: "system:bootstrap:" + token.ID,
		CA: cp.set.CAs[pki.CA], Now: time.Now, Random: rand.Reader,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Name != "csr-w2" {
		t.Errorf("changes %v, want csr-w2 only", changes)
	}
	csrs := admin.CertificatesV1().CertificateSigningRequests()
	for name, want := range map[string]bool{"csr-w2": true, "csr-intruder": false, "csr-w2-by-admin": false} {
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if signed := len(got.Status.Certificate) > 0 && isApproved(got); signed != want {
			t.Errorf("%s: approved and signed %v, want %v (conditions %v)", name, signed, want, got.Status.Conditions)
		}
	}
	w2, _ := csrs.Get(ctx, "csr-w2", metav1.GetOptions{})
	rc := rest.AnonymousClientConfig(cp.admin)
	rc.TLSClientConfig.CertData, rc.TLSClientConfig.KeyData = w2.Status.Certificate, key
	r, err := cp.client(t, rc).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the signed certificate does not log in: %v", err)
	}
	if u := r.Status.UserInfo; u.Username != "system:node:w2" || !strings.Contains(strings.Join(u.Groups, ","), "system:nodes") {
		t.Errorf("signed certificate is %+v, want system:node:w2 in system:nodes", u)
	}

	// Done already: a second call returns at once without touching anything.
	changes, err = SignKubeletCSRs(sctx, admin, SignKubeletCSRsInput{Nodes: []string{"w2"}, Requestor: "system:bootstrap:" + token.ID, CA: cp.set.CAs[pki.CA], Now: time.Now, Random: rand.Reader})
	if err != nil || len(changes) != 0 {
		t.Errorf("second call: %v, %v", changes, err)
	}
	// A node that never asks: the error names it.
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := SignKubeletCSRs(short, admin, SignKubeletCSRsInput{Nodes: []string{"w9"}, Requestor: "system:bootstrap:" + token.ID, CA: cp.set.CAs[pki.CA], Now: time.Now, Random: rand.Reader}); err == nil || !strings.Contains(err.Error(), "kubelet on w9") {
		t.Errorf("missing kubelet: %v", err)
	}
}

// checkPodCIDRs: PodCIDRs gives registered nodes without a pod CIDR the highest free ranges,
// keeps ranges nodes have, and the real API server refuses to change one afterwards.
func checkPodCIDRs(t *testing.T, admin kubernetes.Interface) {
	ctx := context.Background()
	for name, cidr := range map[string]string{"x1": "10.244.255.0/24", "x2": "10.244.0.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	have := map[string]string{}
	got, changes, err := PodCIDRs(ctx, admin, PodCIDRsInput{Nodes: []string{"m1", "w1", "x2"}, Subnets: []string{"10.244.0.0/16"}, MaskSizes: []int{24}, Timeout: 20 * time.Second,
		Have: func(n string, c []string) { have[n] = strings.Join(c, ",") }})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"m1": "10.244.254.0/24", "w1": "10.244.253.0/24", "x2": "10.244.0.0/24"}
	for n, c := range want {
		if strings.Join(got[n], ",") != c || have[n] != c {
			t.Errorf("%s: pod CIDR %q (reported %q), want %q", n, got[n], have[n], c)
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Spec.PodCIDR != c || len(node.Spec.PodCIDRs) != 1 || node.Spec.PodCIDRs[0] != c {
			t.Errorf("node %s spec %q %v, want %s", n, node.Spec.PodCIDR, node.Spec.PodCIDRs, c)
		}
	}
	if len(changes) != 2 {
		t.Errorf("changes %v, want m1 and w1", changes)
	}
	if _, changes, err := PodCIDRs(ctx, admin, PodCIDRsInput{Nodes: []string{"m1", "w1"}, Subnets: []string{"10.244.0.0/16"}, MaskSizes: []int{24}, Timeout: 5 * time.Second}); err != nil || len(changes) != 0 {
		t.Errorf("second call: %v, %v", changes, err)
	}
	// What the controller-manager relies on: a pod CIDR, once set, cannot be changed.
	if err := setPodCIDRs(ctx, admin, "m1", []string{"10.244.1.0/24"}); !apierrors.IsInvalid(err) {
		t.Errorf("changing m1's pod CIDR: err = %v, want invalid", err)
	}
	// nor can a second family be added later: a dual-stack node gets both at once
	if err := setPodCIDRs(ctx, admin, "m1", []string{"10.244.254.0/24", "fd00:10:244:ff::/64"}); !apierrors.IsInvalid(err) {
		t.Errorf("adding an IPv6 pod CIDR to m1: err = %v, want invalid", err)
	}
	d := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "d1"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _, err = PodCIDRs(ctx, admin, PodCIDRsInput{Nodes: []string{"d1"}, Subnets: []string{"10.244.0.0/16", "fd00:10:244::/56"}, MaskSizes: []int{24, 64}, Timeout: 20 * time.Second})
	if err != nil || strings.Join(got["d1"], ",") != "10.244.252.0/24,fd00:10:244:ff::/64" {
		t.Errorf("dual-stack node d1: pod CIDRs %v, err %v", got["d1"], err)
	}
}
