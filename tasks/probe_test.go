package tasks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestUpgradeUntilReloaded: kforge asks the API server for an upgrade to the kubelet's
// /healthz, over HTTP/1.1 with the Connection and Upgrade headers (so the API server dials a new
// connection to the kubelet), until the answer says the handshake completed; the first
// request, whose handshake made the API server read its new certificate and close every
// connection, is answered with that cut.
func TestUpgradeUntilReloaded(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Proto+" "+r.Header.Get("Connection")+" "+r.Header.Get("Upgrade")+" "+r.URL.Path)
		if len(got) == 1 {
			http.Error(w, `{"kind":"Status","message":"error dialing backend: remote error: use of closed network connection"}`, http.StatusInternalServerError)
			return
		}
		http.Error(w, `{"kind":"Status","message":"invalid upgrade response: status code 200"}`, http.StatusInternalServerError)
	}))
	defer srv.Close()
	tries, err := upgradeUntilReloaded(context.Background(), http.DefaultTransport, srv.URL+"/api/v1/nodes/m1/proxy/healthz", 5*time.Second)
	if err != nil || tries != 2 {
		t.Fatalf("upgradeUntilReloaded = %d, %v; want 2 requests", tries, err)
	}
	for _, g := range got {
		if g != "HTTP/1.1 Upgrade kforge-reload /api/v1/nodes/m1/proxy/healthz" {
			t.Errorf("request %q: want an HTTP/1.1 upgrade request to the kubelet's /healthz", g)
		}
	}

	// A kubelet that is never reached: an error within the timeout, with the last answer.
	got = nil
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "error dialing backend: dial tcp 10.0.0.1:10250: connect: connection refused", http.StatusInternalServerError)
	}))
	defer never.Close()
	start := time.Now()
	_, err = upgradeUntilReloaded(context.Background(), http.DefaultTransport, never.URL+"/x", 600*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "connection refused") || time.Since(start) > 3*time.Second {
		t.Errorf("a kubelet never reached: %v after %s; want an error with the last answer within the timeout", err, time.Since(start))
	}
}
