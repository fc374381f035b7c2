package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kforge/kforge/controller"
	"github.com/kforge/kforge/controller/controllertest"
	"github.com/kforge/kforge/kube"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestStateInAManagementCluster: with -i kube://NAMESPACE/NAME the CLI reads a KforgeCluster's
// spec and credentials from a real API server, and keeps the cluster's state there: render
// makes the PKI into the state Secret (a ${VAR} of the spec filled from the credentials, its
// identityFile one of their keys), a
// second render reuses it (the same CA), the lease is given up after each run, the workspace
// and the private copy are gone, and no credential is printed.
func TestStateInAManagementCluster(t *testing.T) {
	crd, err := controller.CRD()
	if err != nil {
		t.Fatal(err)
	}
	cfg, kubeconfig := controllertest.StartAPIServer(t, crd)
	dir := t.TempDir()
	path := filepath.Join(dir, "management.conf")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	t.Setenv("TMPDIR", dir)
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "local"))
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const secret = "hunter2-sudo-password"
	if _, err := k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"ENDPOINT_PORT": []byte("6443"), "SUDO_PASSWORD": []byte(secret), "id_test": []byte("a key file")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	obj := &controller.KforgeCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"}}
	if err := json.Unmarshal([]byte(`{"controlPlaneEndpoint":"198.51.100.10:${ENDPOINT_PORT}",
		"ssh":{"identityFile":"id_test","sudo":"password","sudoPasswordEnv":"SUDO_PASSWORD"},
		"masters":[{"name":"m1","address":"198.51.100.11"}],"workers":[{"name":"w1","address":"198.51.100.21"}],
		"credentialsFrom":[{"name":"creds"}]}`), &obj.Spec); err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	if err := controller.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}

	var cas []string
	for i := range 2 {
		out := filepath.Join(dir, "out", string(rune('a'+i)))
		code, stdout, stderr := kforge(t, "-i", "kube://default/edge", "render", "-o", out)
		if code != 0 {
			t.Fatalf("render %d: code %d\n%s%s", i, code, stdout, stderr)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("render %d printed the sudo password", i)
		}
		if kc, err := os.ReadFile(filepath.Join(out, "admin.conf")); err != nil || !strings.Contains(string(kc), "https://198.51.100.10:6443") {
			t.Errorf("render %d: admin.conf %v; want the endpoint with the port from the Secret\n%s", i, err, kc)
		}
		sec, err := k.CoreV1().Secrets("default").Get(ctx, kube.StateSecretName("edge"), metav1.GetOptions{})
		if err != nil || len(sec.Data["pki__ca.key"]) == 0 || len(sec.Data["pki__ca.crt"]) == 0 {
			t.Fatalf("render %d: the state Secret: %v; want the CA in it", i, err)
		}
		cas = append(cas, string(sec.Data["pki__ca.crt"]))
		if l, err := k.CoordinationV1().Leases("default").Get(ctx, kube.StateLeaseName("edge"), metav1.GetOptions{}); err != nil || (l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "") {
			t.Errorf("render %d: the lease after the run: %v, held by %v", i, err, l.Spec.HolderIdentity)
		}
	}
	if cas[0] != cas[1] {
		t.Error("the second render made a new CA: the first one's state was not kept")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "kforge-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
