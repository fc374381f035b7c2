package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/util/flowcontrol"

	"k8s.io/client-go/kubernetes"
)

// HealthAnswer is one answer of the API server's health endpoint.
type HealthAnswer struct {
	Attempt int
	Elapsed time.Duration
	// StatusCode is the HTTP status, 0 when no answer came (Err says why).
	StatusCode int
	// Body is the answer: with ?verbose, only the checks that failed ("[-]etcd failed: ...")
	// and the verdict; otherwise its tail.
	Body string
	Err  error
}

// OK reports whether the API server said it is ready.
func (h HealthAnswer) OK() bool { return h.Err == nil && h.StatusCode == 200 }

func (h HealthAnswer) String() string {
	switch {
	case h.StatusCode == 0 && h.Err != nil:
		return "no answer: " + h.Err.Error()
	case h.StatusCode == 200:
		return "ready"
	default:
		return fmt.Sprintf("HTTP %d: %s", h.StatusCode, lastLine(h.Body))
	}
}

// WaitAPIServerInput tunes WaitForAPIServer.
type WaitAPIServerInput struct {
	// Path is the health endpoint; default /readyz.
	Path string
	// Timeout bounds the whole wait; default 4 minutes (kubeadm's
	// controlPlaneComponentHealthCheck). ctx may end it earlier.
	Timeout time.Duration
	// Interval is the first pause between attempts, growing ×1.5 up to MaxInterval; defaults
	// 200 ms and 2 s.
	Interval, MaxInterval time.Duration
	// RequestTimeout bounds each attempt; default 10 s (with etcd down, /readyz takes ~4 s to
	// answer).
	RequestTimeout time.Duration
	// Progress, when set, is called with every answer.
	Progress func(HealthAnswer)
}

// APIServerNotReadyError says the API server did not become ready in time, with its last
// health answer.
type APIServerNotReadyError struct {
	Path   string
	Waited time.Duration
	Last   HealthAnswer
	Cause  error // why waiting stopped: the deadline or ctx's cause
}

func (e *APIServerNotReadyError) Error() string {
	return fmt.Sprintf("API server not ready after %s (%d attempts); last %s answer: %s", e.Waited.Round(time.Second), e.Last.Attempt, e.Path, e.Last)
}

func (e *APIServerNotReadyError) Unwrap() error { return e.Cause }

// Details are the last answer's status and body, for the error printer.
func (e *APIServerNotReadyError) Details() []string {
	var d []string
	if e.Last.StatusCode != 0 {
		d = append(d, fmt.Sprintf("last answer: HTTP %d", e.Last.StatusCode))
	}
	if e.Last.Err != nil {
		d = append(d, "last error: "+e.Last.Err.Error())
	}
	for l := range strings.SplitSeq(strings.TrimRight(e.Last.Body, "\n"), "\n") {
		if l != "" {
			d = append(d, "  "+l)
		}
	}
	return d
}

// WaitForAPIServer polls the API server's /readyz (?verbose) until it answers 200, backing off
// between attempts, and reports each answer through in.Progress. On timeout it returns an
// *APIServerNotReadyError carrying the last answer (status code and the tail of the body).
func WaitForAPIServer(ctx context.Context, c kubernetes.Interface, in WaitAPIServerInput) error {
	if in.Path == "" {
		in.Path = "/readyz"
	}
	if in.Timeout <= 0 {
		in.Timeout = 4 * time.Minute
	}
	if in.Interval <= 0 {
		in.Interval = 200 * time.Millisecond
	}
	if in.MaxInterval <= 0 {
		in.MaxInterval = 2 * time.Second
	}
	if in.RequestTimeout <= 0 {
		in.RequestTimeout = 10 * time.Second
	}
	rc := c.Discovery().RESTClient()
	if rc == nil {
		return errors.New("wait for API server: the client has no REST client (a fake clientset?)")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, in.Timeout, fmt.Errorf("waited %s", in.Timeout))
	defer cancel()
	pause := in.Interval
	var last, prev, lastHTTP HealthAnswer
	for attempt := 1; ; attempt++ {
		rctx, rcancel := context.WithTimeout(ctx, in.RequestTimeout)
		// Not throttled by the client's QPS limit: the wait paces its own attempts, and a
		// limiter that refuses a request it predicts would outlast the deadline is no answer.
		res := rc.Get().AbsPath(in.Path).Param("verbose", "").Throttle(flowcontrol.NewFakeAlwaysRateLimiter()).Do(rctx)
		rcancel()
		var code int
		res.StatusCode(&code)
		body, err := res.Raw()
		last = HealthAnswer{Attempt: attempt, Elapsed: time.Since(start), StatusCode: code, Body: healthBody(string(body)), Err: err}
		if code != 0 {
			// An HTTP answer: its status and body say more than client-go's error for it.
			last.Err = nil
		}
		if ctx.Err() != nil && code == 0 && attempt > 1 {
			// The wait's own deadline cut this attempt short (in the request or in client-go's
			// rate limiter): the last real answer says more than "context deadline exceeded" —
			// the API server's last HTTP answer if there was one, else the previous attempt's.
			real := prev
			if lastHTTP.StatusCode != 0 {
				real = lastHTTP
			}
			return &APIServerNotReadyError{Path: in.Path, Waited: time.Since(start), Last: real, Cause: context.Cause(ctx)}
		}
		prev = last
		if code != 0 {
			lastHTTP = last
		}
		if in.Progress != nil {
			in.Progress(last)
		}
		if last.OK() {
			return nil
		}
		select {
		case <-ctx.Done():
			return &APIServerNotReadyError{Path: in.Path, Waited: time.Since(start), Last: last, Cause: context.Cause(ctx)}
		case <-time.After(pause):
		}
		pause = min(pause*3/2, in.MaxInterval)
	}
}

// healthBody reduces a verbose health answer to its failed checks and verdict (the passing
// checks, some forty lines, say nothing); any other body to its tail.
func healthBody(body string) string {
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	var out []string
	verbose := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "[+]"):
			verbose = true
		case strings.HasPrefix(l, "[-]"):
			verbose = true
			out = append(out, l)
		}
	}
	if !verbose {
		return tail(body, 2048, 30)
	}
	return tail(strings.Join(append(out, lines[len(lines)-1]), "\n"), 4096, 40)
}

// tail keeps the last lines of s, at most maxLines lines and about maxBytes bytes.
func tail(s string, maxBytes, maxLines int) string {
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// lastLine is the most telling line of a health body: the first failed check, else the last
// line.
func lastLine(body string) string {
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "[-]") {
			return l
		}
	}
	return lines[len(lines)-1]
}

// deadlineCut says whether err, from a request made with ctx, is ctx's end rather than an
// answer: ctx is done, or client-go's rate limiter refused to wait past ctx's deadline, which it
// does just before that deadline comes (golang.org/x/time/rate's "would exceed context
// deadline", an error that wraps nothing). A wait that gives up at its deadline reports its own
// findings then, not the limiter's refusal.
func deadlineCut(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	_, has := ctx.Deadline()
	return has && err != nil && strings.Contains(err.Error(), "would exceed context deadline")
}
