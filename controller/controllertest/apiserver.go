// Package controllertest starts a real API server for tests of kforge controller and of the
// CLI's kube:// state: controller-runtime's envtest (etcd and kube-apiserver) from the
// binaries the bundle package builds for the default release.
package controllertest

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/release"
)

// StartAPIServer starts etcd and kube-apiserver with crds installed, stopped when the test
// ends. It is an integration test's: without its prerequisites the test is skipped (or fails,
// with KFORGE_REQUIRE_INTEGRATION=1).
func StartAPIServer(t *testing.T, crds ...*apiextensionsv1.CustomResourceDefinition) (cfg *rest.Config, kubeconfig []byte) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Require(t, errors.New("the go command is not on PATH (it builds the Kubernetes binaries)"))
	}
	testenv.Require(t, nil)
	o := bundle.BuildOptions{Version: release.Default(), Report: testenv.Report(t)}
	k8s, err := bundle.KubernetesBinaries(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := bundle.EtcdBinaries(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		CRDs: crds,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: filepath.Join(k8s, "kube-apiserver")},
			Etcd:      &envtest.Etcd{Path: filepath.Join(etcd, "etcd")},
		},
	}
	cfg, err = env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("envtest stop: %v", err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "kforge-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err = user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kubeconfig
}
