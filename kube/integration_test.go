package kube

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
)

// binaries returns kube-apiserver and etcd as the bundle package builds them
// (bundle.KubernetesBinaries, bundle.EtcdBinaries; cached after the first build).
func binaries(t testing.TB) (k8sDir, etcd string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Require(t, errors.New("the go command is not on PATH (it builds the Kubernetes binaries)"))
	}
	testenv.Require(t, nil)
	ctx := context.Background()
	o := bundle.BuildOptions{Version: release.Default(), Report: testenv.Report(t)}
	k8s, err := bundle.KubernetesBinaries(ctx, o)
	if err != nil {
		t.Fatalf("kubernetes binaries: %v", err)
	}
	dir, err := bundle.EtcdBinaries(ctx, o)
	if err != nil {
		t.Fatalf("etcd binaries: %v", err)
	}
	etcd = filepath.Join(dir, "etcd")
	return k8s, etcd
}

type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func writeFile(t testing.TB, path string, data []byte) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// controlPlane is a real etcd and kube-apiserver on loopback, with kforge's PKI.
type controlPlane struct {
	cluster    *inventory.Cluster
	set        *pki.Set
	server     string // https://127.0.0.1:port
	apiserver  *testenv.Process
	etcd       *testenv.Process
	superAdmin *rest.Config
	admin      *rest.Config
}

// integrationCluster is a one-master, one-worker inventory whose master certificates also
// name 127.0.0.1, where the test's API server listens. Nothing is ever sent to the hosts'
// addresses.
func integrationCluster() *inventory.Cluster {
	c, err := (&inventory.Cluster{
		APIVersion: inventory.APIVersion, Kind: inventory.Kind, Name: "kube-it",
		Networking: inventory.Networking{PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12", DNSDomain: "cluster.local"},
		PKI: inventory.PKI{KeyAlgorithm: "ecdsa-p256", CertValidity: inventory.DefaultCertValidity, CAValidity: inventory.DefaultCAValidity,
			APIServerCertSANs: []string{"127.0.0.1"}},
		Kubelet: inventory.Kubelet{CgroupDriver: "systemd", AllowCgroupV1: true},
		Masters: []inventory.Host{{Name: "m1", Address: "198.51.100.10", Labels: map[string]string{"tier": "control"}}},
		Workers: []inventory.Host{{Name: "w1", Address: "198.51.100.11", Labels: map[string]string{"gpu": "yes"},
			Taints: []inventory.Taint{{Key: "dedicated", Value: "ml", Effect: "NoSchedule"}}}},
	}).AtVersion(release.Default())
	if err != nil {
		panic(err)
	}
	return c
}

// startControlPlane starts etcd and kube-apiserver for cluster c with the PKI kept in
// pkiState (created there when missing, so two control planes can share one CA).
func startControlPlane(t testing.TB, c *inventory.Cluster, pkiState string) *controlPlane {
	t.Helper()
	k8sDir, etcdBin := binaries(t)
	apiserverBin := filepath.Join(k8sDir, "kube-apiserver")
	state := t.TempDir()
	set, _, err := pki.EnsureCluster(c, "", pkiState, time.Now(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(state, "files")
	caCrt, _ := testenv.WritePair(t, dir, "ca", set.CAs[pki.CA])
	etcdCA, _ := testenv.WritePair(t, dir, "etcd-ca", set.CAs[pki.EtcdCA])
	srvCrt, srvKey := testenv.WritePair(t, dir, "etcd-server", set.Get("etcd-server", "m1"))
	peerCrt, peerKey := testenv.WritePair(t, dir, "etcd-peer", set.Get("etcd-peer", "m1"))
	ecCrt, ecKey := testenv.WritePair(t, dir, "apiserver-etcd-client", set.Get("apiserver-etcd-client", ""))
	asCrt, asKey := testenv.WritePair(t, dir, "apiserver", set.Get("apiserver", "m1"))
	kcCrt, kcKey := testenv.WritePair(t, dir, "apiserver-kubelet-client", set.Get("apiserver-kubelet-client", ""))
	saKeyPEM, err := pki.EncodeKey(set.ServiceAccount)
	if err != nil {
		t.Fatal(err)
	}
	saPub, err := pki.EncodePublicKey(set.ServiceAccount.Public())
	if err != nil {
		t.Fatal(err)
	}
	saKey := writeFile(t, filepath.Join(dir, "sa.key"), saKeyPEM)
	saPubFile := writeFile(t, filepath.Join(dir, "sa.pub"), saPub)

	clientPort, peerPort, metricsPort, apiPort := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	clientURL := "https://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "https://127.0.0.1:" + strconv.Itoa(peerPort)
	etcdProc := testenv.Start(t, etcdBin,
		"--name=m1", "--data-dir="+filepath.Join(state, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=m1="+peerURL, "--initial-cluster-state=new",
		"--listen-metrics-urls=http://127.0.0.1:"+strconv.Itoa(metricsPort),
		"--cert-file="+srvCrt, "--key-file="+srvKey, "--trusted-ca-file="+etcdCA, "--client-cert-auth=true",
		"--peer-cert-file="+peerCrt, "--peer-key-file="+peerKey, "--peer-trusted-ca-file="+etcdCA, "--peer-client-cert-auth=true",
		"--snapshot-count=10000", "--log-level=warn",
	)
	cp := &controlPlane{cluster: c, set: set, server: "https://127.0.0.1:" + strconv.Itoa(apiPort), etcd: etcdProc}
	// The flags that matter here are those of kforge's static pod (templates.ControlPlane):
	// RBAC and Node authorization, bootstrap-token authentication, the service-account keys.
	// Anonymous requests stay enabled, as kubeadm leaves them, for cluster-info.
	cp.apiserver = testenv.Start(t, apiserverBin,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--advertise-address=198.51.100.10",
		"--etcd-servers="+clientURL, "--etcd-cafile="+etcdCA, "--etcd-certfile="+ecCrt, "--etcd-keyfile="+ecKey,
		"--client-ca-file="+caCrt, "--tls-cert-file="+asCrt, "--tls-private-key-file="+asKey,
		"--kubelet-client-certificate="+kcCrt, "--kubelet-client-key="+kcKey,
		"--service-account-key-file="+saPubFile, "--service-account-signing-key-file="+saKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=Node,RBAC",
		"--enable-bootstrap-token-auth=true", "--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		"--cert-dir="+filepath.Join(state, "apiserver-certs"),
	)
	cp.superAdmin = cp.restConfig(t, "super-admin.conf")
	cp.admin = cp.restConfig(t, "admin.conf")
	return cp
}

func (cp *controlPlane) restConfig(t testing.TB, name string) *rest.Config {
	t.Helper()
	kc, err := pki.Kubeconfig(cp.cluster.Name, cp.server, cp.set.TrustPEM(pki.CA), cp.set.Get(name, ""))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 200, 400
	return rc
}

func (cp *controlPlane) client(t testing.TB, rc *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// anonymous is a client with no credentials that trusts the cluster CA.
func (cp *controlPlane) anonymous(t testing.TB) kubernetes.Interface {
	rc := rest.AnonymousClientConfig(cp.admin)
	return cp.client(t, rc)
}

func (cp *controlPlane) token(t testing.TB, token string) kubernetes.Interface {
	rc := rest.AnonymousClientConfig(cp.admin)
	rc.BearerToken = token
	return cp.client(t, rc)
}

// waitUp waits for the API server, failing with its log when it does not come up.
func (cp *controlPlane) waitUp(t testing.TB) []HealthAnswer {
	t.Helper()
	var answers []HealthAnswer
	err := WaitForAPIServer(context.Background(), cp.client(t, cp.superAdmin), WaitAPIServerInput{
		Timeout:  2 * time.Minute,
		Progress: func(h HealthAnswer) { answers = append(answers, h) },
	})
	if err != nil {
		var nre *APIServerNotReadyError
		if errors.As(err, &nre) {
			t.Fatalf("%v\n%s", err, strings.Join(nre.Details(), "\n"))
		}
		t.Fatal(err)
	}
	return answers
}
