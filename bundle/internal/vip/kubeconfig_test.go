package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFollowsItsKubeconfig: after the kubeconfig file is rewritten (a renewed certificate, a new
// CA), the next request of the election goes out with the new file's settings, without a
// restart; a broken rewrite keeps the client before it.
func TestFollowsItsKubeconfig(t *testing.T) {
	var hitsA, hitsB atomic.Int32
	server := func(hits *atomic.Int32) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			http.NotFound(w, r)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := server(&hitsA), server(&hitsB)
	path := filepath.Join(t.TempDir(), "scheduler.conf")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := func(server string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: not-logged}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", server)
	}
	write(kubeconfig(a.URL))
	f, err := followKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		_, _ = f.Leases("kube-system").Get(context.Background(), "kforge-vip", metav1.GetOptions{})
	}
	get()
	write(kubeconfig(b.URL))
	get()
	write("not: [a kubeconfig")
	get()
	if a, b := hitsA.Load(), hitsB.Load(); a != 1 || b != 2 {
		t.Errorf("requests: %d to the first server, %d to the second; want 1 and 2 (the broken file kept the second)", a, b)
	}
}
