package kube

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/pki"
)

// SignKubeletCSRsInput is which kubelets' client certificate requests SignKubeletCSRs answers.
type SignKubeletCSRsInput struct {
	// Nodes are the node names whose kubelets are joining by TLS bootstrap.
	Nodes []string
	// Requestor is the only user whose requests are answered: the bootstrap token's
	// "system:bootstrap:<token id>".
	Requestor string
	// CA signs the certificates (the cluster CA, as kube-controller-manager's signer).
	CA *pki.KeyPair
	// Validity is the longest lifetime signed (kube-controller-manager's
	// --cluster-signing-duration; 0 means its default, a year); a request may ask for less.
	Validity time.Duration
	Now      func() time.Time
	Random   io.Reader
	// Interval between looks at the API (default 100 ms).
	Interval time.Duration
}

// SignKubeletCSRs approves and signs the kubelet client certificate requests of in.Nodes, as
// kube-controller-manager's csrapproving and csrsigning-kubelet-client controllers would, so
// that joining kubelets get their certificate the moment they ask rather than when the
// controller-manager has started (seconds later on a fresh cluster). Only requests that are
// exactly a kubelet client CSR (signer kubernetes.io/kube-apiserver-client-kubelet, subject
// system:node:<name> in system:nodes, no SANs, client-auth usages), for one of in.Nodes, made
// by in.Requestor, are answered; every other request is left to the controller-manager, which
// also keeps handling renewals. It returns once every node is registered or has an issued
// certificate, or ctx ends; the error then names the nodes still waiting.
func SignKubeletCSRs(ctx context.Context, c kubernetes.Interface, in SignKubeletCSRsInput) ([]Change, error) {
	if in.Interval <= 0 {
		in.Interval = 100 * time.Millisecond
	}
	if in.Validity <= 0 {
		in.Validity = pki.DefaultSigningDuration
	}
	var out []Change
	pending := slices.Clone(in.Nodes)
	for {
		var err error
		if pending, err = unregistered(ctx, c, pending); err != nil {
			return out, err
		}
		if len(pending) > 0 && ctx.Err() == nil {
			list, err := c.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil && ctx.Err() == nil {
				return out, fmt.Errorf("list certificate signing requests: %w", err)
			} else if err != nil {
				list = &certv1.CertificateSigningRequestList{} // ctx ended: reported below
			}
			var still []string
			for _, n := range pending {
				issued := false
				for i := range list.Items {
					csr := &list.Items[i]
					if node, err := kubeletClientCSRFor(csr, in.Requestor); err != nil || node != n {
						continue
					}
					if len(csr.Status.Certificate) > 0 {
						issued = true
					} else if !isDenied(csr) {
						signed, err := approveAndSign(ctx, c, csr, n, in)
						if err != nil {
							return out, err
						}
						if signed {
							out = append(out, Change{Kind: "CertificateSigningRequest", Name: csr.Name, Action: Updated})
							issued = true
						}
					}
				}
				if !issued {
					still = append(still, n)
				}
			}
			pending = still
		}
		if len(pending) == 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			sort.Strings(pending)
			return out, &NodesError{Nodes: pending, Err: fmt.Errorf("no client certificate request from the kubelet on %s (is kubelet running there? journalctl -u kubelet): %w", strings.Join(pending, ", "), ctx.Err())}
		case <-time.After(in.Interval):
		}
	}
}

// unregistered returns the nodes of names that have not registered yet.
func unregistered(ctx context.Context, c kubernetes.Interface, names []string) ([]string, error) {
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if deadlineCut(ctx, err) {
			return names, nil // the caller reports the end of ctx
		}
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return slices.ContainsFunc(nodes.Items, func(o corev1.Node) bool { return o.Name == n })
	}), nil
}

// isDenied is a request that was denied or failed: the kubelet makes a new one.
func isDenied(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
			return true
		}
	}
	return false
}

// kubeletClientUsages are the usage sets kube-controller-manager accepts for a kubelet client
// certificate (pkg/apis/certificates ValidateKubeletClientCSR): with key encipherment for RSA
// keys, without for the others.
var kubeletClientUsages = [][]certv1.KeyUsage{
	{certv1.UsageClientAuth, certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment},
	{certv1.UsageClientAuth, certv1.UsageDigitalSignature},
}

const nodeUserPrefix = "system:node:"

// kubeletClientCSRFor returns the node a request is a kubelet client certificate for, or an
// error saying why it is not one kforge answers.
func kubeletClientCSRFor(csr *certv1.CertificateSigningRequest, requestor string) (string, error) {
	if csr.Spec.SignerName != certv1.KubeAPIServerClientKubeletSignerName {
		return "", fmt.Errorf("signer %s", csr.Spec.SignerName)
	}
	if csr.Spec.Username != requestor {
		return "", fmt.Errorf("requested by %s", csr.Spec.Username)
	}
	cr, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return "", err
	}
	if !slices.Equal(cr.Subject.Organization, []string{"system:nodes"}) {
		return "", fmt.Errorf("organization %v", cr.Subject.Organization)
	}
	if len(cr.DNSNames)+len(cr.EmailAddresses)+len(cr.IPAddresses)+len(cr.URIs) > 0 {
		return "", errors.New("subject alternative names")
	}
	node, ok := strings.CutPrefix(cr.Subject.CommonName, nodeUserPrefix)
	if !ok || node == "" {
		return "", fmt.Errorf("common name %q", cr.Subject.CommonName)
	}
	usages := slices.Clone(csr.Spec.Usages)
	slices.Sort(usages)
	usages = slices.Compact(usages)
	if !slices.ContainsFunc(kubeletClientUsages, func(want []certv1.KeyUsage) bool { return slices.Equal(usages, want) }) {
		return "", fmt.Errorf("usages %v", csr.Spec.Usages)
	}
	return node, nil
}

func parseCSR(data []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("request is not a PEM certificate request")
	}
	return x509.ParseCertificateRequest(b.Bytes)
}

// approveAndSign approves csr (unless it is) and puts its certificate in its status.
// It reports false, without an error, when another party changed the request first (the
// controller-manager answering too): the caller looks again.
func approveAndSign(ctx context.Context, c kubernetes.Interface, csr *certv1.CertificateSigningRequest, node string, in SignKubeletCSRsInput) (bool, error) {
	cr, err := parseCSR(csr.Spec.Request)
	if err != nil {
		return false, err
	}
	ttl := in.Validity
	if s := csr.Spec.ExpirationSeconds; s != nil {
		// as the controller-manager: honoured when shorter, never below 10 minutes
		ttl = min(max(time.Duration(*s)*time.Second, 10*time.Minute), in.Validity)
	}
	var ku x509.KeyUsage
	var eku []x509.ExtKeyUsage
	for _, u := range csr.Spec.Usages {
		switch u {
		case certv1.UsageDigitalSignature:
			ku |= x509.KeyUsageDigitalSignature
		case certv1.UsageKeyEncipherment:
			ku |= x509.KeyUsageKeyEncipherment
		case certv1.UsageClientAuth:
			eku = append(eku, x509.ExtKeyUsageClientAuth)
		}
	}
	cert, err := pki.SignCSR(cr, ku, eku, in.CA, in.Now(), ttl, in.Random)
	if err != nil {
		return false, fmt.Errorf("node %s: %w", node, err)
	}
	csrs := c.CertificatesV1().CertificateSigningRequests()
	if !isApproved(csr) {
		csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{
			Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AutoApproved",
			Message: "kforge apply: kubelet client certificate for node " + node + " of the inventory, requested with kforge's bootstrap token",
		})
		updated, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("approve certificate signing request %s of node %s: %w", csr.Name, node, err)
		}
		csr = updated
	}
	csr.Status.Certificate = pki.EncodeCert(cert)
	if _, err := csrs.UpdateStatus(ctx, csr, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("sign certificate signing request %s of node %s: %w", csr.Name, node, err)
	}
	return true, nil
}

func isApproved(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
