package tasks

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/state"
)

// UserKubeconfig is a kubeconfig for a person or a CI job, signed by the cluster CA in the
// state dir, and its record (kforge kubeconfig --user).
type UserKubeconfig struct {
	Kubeconfig []byte // holds the private key: never logged
	Record     state.Issued
}

// IssueUserKubeconfig signs a client certificate for user in groups, valid for ttl, and
// returns it as a kubeconfig for the cluster's endpoint; the issue is recorded in the state dir
// (who, groups, serial, expiry, CA), the kubeconfig is not kept. The caller holds the state
// dir's lock.
func IssueUserKubeconfig(_ context.Context, c *inventory.Cluster, o Options, user string, groups []string, ttl time.Duration) (*UserKubeconfig, error) {
	o = o.withDefaults()
	switch {
	case strings.TrimSpace(user) == "":
		return nil, fmt.Errorf("--user: give the user's name (the certificate's CN, the name RBAC bindings refer to)")
	case strings.HasPrefix(user, "system:"):
		return nil, fmt.Errorf("--user %q: names starting with system: are Kubernetes' own identities; choose a person's or a job's name", user)
	case ttl <= 0:
		return nil, fmt.Errorf("--ttl %s: give a positive duration, such as 24h or 30d", ttl)
	}
	for _, g := range groups {
		if g == pki.MastersGroup {
			return nil, fmt.Errorf("--group %s: that group bypasses all authorization and cannot be revoked; bind a ClusterRole (cluster-admin if need be) to a group of your own instead", g)
		}
	}
	set, err := pki.Load(o.State.PKI(), pki.CA)
	if err != nil {
		return nil, err
	}
	ca := set.CAs[pki.CA]
	alg, err := pki.ParseKeyAlgorithm(c.PKI.KeyAlgorithm)
	if err != nil {
		return nil, err
	}
	now := o.Now()
	if left := ca.Cert.NotAfter.Sub(now); ttl > left {
		return nil, fmt.Errorf("--ttl %s: the cluster CA expires in %s (%s); a certificate cannot outlive its CA", ttl, left.Round(time.Hour), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	kp, err := pki.Issue(pki.UserRequest(user, groups), ca, alg, now, ttl, o.Rand)
	if err != nil {
		return nil, err
	}
	data, err := pki.Kubeconfig(c.Name, pki.APIServerURL(pki.Endpoint(c)), set.TrustPEM(pki.CA), kp)
	if err != nil {
		return nil, err
	}
	rec := state.Issued{User: user, Groups: groups, Serial: kp.Cert.SerialNumber.String(), Issued: now.UTC().Truncate(time.Second),
		NotAfter: kp.Cert.NotAfter.UTC(), CA: pki.SPKIPin(ca.Cert), Cert: string(pki.EncodeCert(kp.Cert))}
	if err := o.State.RecordIssued(rec); err != nil {
		return nil, err
	}
	return &UserKubeconfig{Kubeconfig: data, Record: rec}, nil
}

// issuedUsers are the state dir's issued kubeconfigs, as certs check shows them: a kubeconfig
// signed by another CA than the state dir's (after rotate-ca) needs replacing.
func issuedUsers(d state.Dir, cas map[string]*x509.Certificate) ([]pki.Inspection, error) {
	all, err := d.ReadIssued()
	if err != nil {
		return nil, err
	}
	var out []pki.Inspection
	for _, u := range all {
		name := "user:" + u.User
		c, err := pki.ParseCert([]byte(u.Cert))
		if err != nil {
			out = append(out, pki.Inspection{Where: "issued", Name: name, File: d.IssuedRecord(), Error: "unreadable: " + err.Error()})
			continue
		}
		r := pki.UserRequest(u.User, u.Groups)
		in := pki.Inspect("issued", name, d.IssuedRecord(), c, cas, pki.Expect{Subject: &r.Subject, Signer: pki.CA})
		for i, d := range in.Drift {
			if strings.HasPrefix(d, "not signed by") {
				in.Drift[i] = "signed by a CA the cluster no longer uses: issue a new kubeconfig (kforge kubeconfig --user " + u.User + ")"
			}
		}
		out = append(out, in)
	}
	return out, nil
}
