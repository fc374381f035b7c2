package kube

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// DryRun makes every write through clients built from cfg a server-side dry run: each POST, PUT,
// PATCH and DELETE carries dryRun=All, so the API server validates it, runs admission and
// answers with what it would store, and stores nothing. Reads are untouched. kforge plan runs
// apply's own object functions through such clients, so plan and apply cannot disagree.
func DryRun(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return dryRunTransport{rt} })
	return cfg
}

type dryRunTransport struct{ rt http.RoundTripper }

func (t dryRunTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return t.rt.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	q := req.URL.Query()
	q.Set("dryRun", "All")
	req.URL.RawQuery = q.Encode()
	return t.rt.RoundTrip(req)
}
