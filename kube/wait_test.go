package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// healthServer answers /readyz with 500 and a failing check until ready() says otherwise.
func healthServer(t *testing.T, ready func(n int) bool) kubernetes.Interface {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !r.URL.Query().Has("verbose") {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusNotFound)
			return
		}
		if ready(int(n.Add(1))) {
			fmt.Fprint(w, "[+]ping ok\n[+]etcd ok\nreadyz check passed\n")
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "[+]ping ok\n[-]etcd failed: reason withheld\n[+]informer-sync ok\nreadyz check failed\n")
	}))
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWaitForAPIServerBacksOffUntilReady(t *testing.T) {
	c := healthServer(t, func(n int) bool { return n >= 3 })
	var answers []HealthAnswer
	err := WaitForAPIServer(context.Background(), c, WaitAPIServerInput{Interval: time.Millisecond, Progress: func(h HealthAnswer) { answers = append(answers, h) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != 3 || answers[0].StatusCode != 500 || !answers[2].OK() {
		t.Fatalf("answers %+v", answers)
	}
	if s := answers[0].String(); s != "HTTP 500: [-]etcd failed: reason withheld" {
		t.Errorf("answer line %q", s)
	}
}

func TestWaitForAPIServerTimeoutCarriesLastAnswer(t *testing.T) {
	c := healthServer(t, func(int) bool { return false })
	err := WaitForAPIServer(context.Background(), c, WaitAPIServerInput{Timeout: 100 * time.Millisecond, Interval: 5 * time.Millisecond})
	var nre *APIServerNotReadyError
	if !errors.As(err, &nre) {
		t.Fatalf("err = %v, want *APIServerNotReadyError", err)
	}
	if nre.Last.StatusCode != 500 || !strings.Contains(err.Error(), "[-]etcd failed") {
		t.Errorf("error %q, last %+v", err, nre.Last)
	}
	d := strings.Join(nre.Details(), "\n")
	if !strings.Contains(d, "HTTP 500") || !strings.Contains(d, "[-]etcd failed: reason withheld") || !strings.Contains(d, "readyz check failed") {
		t.Errorf("details:\n%s", d)
	}
	if strings.Contains(d, "[+]") {
		t.Errorf("details list passing checks:\n%s", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) && nre.Cause == nil {
		t.Error("no cause")
	}
}

func TestWaitForAPIServerNoAnswer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	c, err := kubernetes.NewForConfig(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	err = WaitForAPIServer(context.Background(), c, WaitAPIServerInput{Timeout: 50 * time.Millisecond, Interval: 5 * time.Millisecond})
	var nre *APIServerNotReadyError
	if !errors.As(err, &nre) || nre.Last.StatusCode != 0 || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestWaitForAPIServerKeepsTheLastRealAnswer(t *testing.T) {
	// The first answer is a 500; later ones hang past the wait's deadline.
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > 1 {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n")
	}))
	defer srv.Close()
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = WaitForAPIServer(context.Background(), c, WaitAPIServerInput{Timeout: 300 * time.Millisecond, Interval: time.Millisecond})
	var nre *APIServerNotReadyError
	if !errors.As(err, &nre) || nre.Last.StatusCode != 500 || !strings.Contains(err.Error(), "[-]etcd failed") {
		t.Fatalf("err = %v, want the 500 answer", err)
	}
}

// TestDeadlineCut: client-go's rate limiter refuses, before the deadline comes, a wait it
// predicts would outlast it, with an error that wraps no context error; that refusal is the
// wait's end, as the deadline itself is, and no other error is.
func TestDeadlineCut(t *testing.T) {
	rl := flowcontrol.NewTokenBucketRateLimiter(0.01, 1) // one token, the next in 100 s
	if !rl.TryAccept() {
		t.Fatal("the first token was not there")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := rl.Wait(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("rate limiter's Wait: %v (context: %v); want its refusal before the deadline", err, ctx.Err())
	}
	refusal := fmt.Errorf("client rate limiter Wait returned an error: %w", err) // as client-go wraps it
	if !deadlineCut(ctx, refusal) {
		t.Errorf("deadlineCut(%q) = false before the deadline; want true", refusal)
	}
	if deadlineCut(ctx, errors.New("connection refused")) {
		t.Error("another error before the deadline counted as the deadline")
	}
	if deadlineCut(context.Background(), refusal) {
		t.Error("a refusal without a deadline counted as the deadline")
	}
	done, stop := context.WithCancel(context.Background())
	stop()
	if !deadlineCut(done, errors.New("connection refused")) {
		t.Error("an error after the context ended did not count as its end")
	}
}
