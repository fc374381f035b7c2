// Command agent is the end-to-end tests' workload, built into a one-file image by the tests:
//
//	agent serve           HTTP on :8080, answering with the pod's hostname (/burn?ms=N: after N
//	                      ms of CPU work, not logged); logs one line per other request;
//	                      on SIGTERM it goes on serving for 5 s (until its endpoint is gone
//	                      everywhere), then exits
//	agent lookup NAME     resolve NAME through the pod's DNS and print the addresses
//	agent get URL [T]     GET URL and print the body; give up after T (a Go duration; 20 s)
//	agent bench URL N     GET URL N times, one after another, each on a new connection; prints
//	                      "requests=N failed=F p50=D p90=D p99=D max=D" (the answered ones')
//	agent probe URL       GET URL every 100 ms on a new connection (2 s timeout), forever; logs
//	                      each failure and, every 2 s, "probe ok=N failed=M"
//	agent webhook CRT KEY a validating admission webhook on HTTPS :8443: it denies objects
//	                      labelled kforge.test/webhook=deny, allows the others, and logs each
//	agent write FILE TEXT write TEXT into FILE and sync it (and its directory) to the disk
//	agent cat FILE        print FILE
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: agent serve | lookup NAME | get URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch os.Args[1] {
	case "serve":
		host, _ := os.Hostname()
		fmt.Println("agent serving on :8080 as", host)
		http.HandleFunc("/burn", func(w http.ResponseWriter, r *http.Request) {
			ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
			for end := time.Now().Add(time.Duration(ms) * time.Millisecond); time.Now().Before(end); {
			}
			fmt.Fprint(w, host)
		})
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Println("request from", r.RemoteAddr)
			fmt.Fprint(w, host)
		})
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			fmt.Println("SIGTERM: serving 5 s more")
			time.Sleep(5 * time.Second)
			os.Exit(0)
		}()
		if err := http.ListenAndServe(":8080", nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "probe":
		probe(os.Args[2])
	case "bench":
		n, err := strconv.Atoi(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		bench(os.Args[2], n)
	case "webhook":
		fmt.Println("agent webhook on :8443")
		http.HandleFunc("/validate", validate)
		if err := http.ListenAndServeTLS(":8443", os.Args[2], os.Args[3], nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "write":
		if err := writeSynced(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("wrote %d bytes to %s\n", len(os.Args[3]), os.Args[2])
	case "cat":
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
	case "lookup":
		addrs, err := net.DefaultResolver.LookupHost(ctx, os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, a := range addrs {
			fmt.Println(a)
		}
	case "get":
		if len(os.Args) > 3 {
			d, err := time.ParseDuration(os.Args[3])
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			ctx, cancel = context.WithTimeout(context.Background(), d)
			defer cancel()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, os.Args[2], nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		io.Copy(os.Stdout, resp.Body)
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

// writeSynced writes text into the file name and syncs the file and its directory: what a
// pod wrote is on the disk when the pod ends.
func writeSynced(name, text string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// newConnClient opens a new connection for every request and gives up on one after 2 s.
func newConnClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// getOnce requests url and reads the whole answer, which must be 200 OK.
func getOnce(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// bench requests url n times on new connections and prints the latencies' quantiles.
func bench(url string, n int) {
	client := newConnClient()
	var took []time.Duration
	failed := 0
	for range n {
		start := time.Now()
		if err := getOnce(client, url); err != nil {
			failed++
			continue
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	q := func(f float64) time.Duration {
		if len(took) == 0 {
			return 0
		}
		return took[min(len(took)-1, int(f*float64(len(took))))]
	}
	fmt.Printf("requests=%d failed=%d p50=%s p90=%s p99=%s max=%s\n", n, failed, q(0.5), q(0.9), q(0.99), q(1))
}

// probe requests url forever and counts the answers.
func probe(url string) {
	client := newConnClient()
	ok, failed := 0, 0
	last := time.Now()
	for {
		start := time.Now()
		if err := getOnce(client, url); err != nil {
			failed++
			fmt.Printf("%s failed: %v\n", start.UTC().Format(time.RFC3339Nano), err)
		} else {
			ok++
		}
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Printf("probe ok=%d failed=%d\n", ok, failed)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// review is the part of an admission.k8s.io/v1 AdmissionReview the webhook reads and writes.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID    string `json:"uid"`
		Object struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		} `json:"object"`
	} `json:"request,omitempty"`
	Response *reviewResponse `json:"response,omitempty"`
}

type reviewResponse struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
	Status  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status,omitempty"`
}

// validate answers an AdmissionReview: objects labelled kforge.test/webhook=deny are denied.
func validate(w http.ResponseWriter, r *http.Request) {
	var rv review
	if err := json.NewDecoder(r.Body).Decode(&rv); err != nil || rv.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	o := rv.Request.Object
	resp := &reviewResponse{UID: rv.Request.UID, Allowed: o.Metadata.Labels["kforge.test/webhook"] != "deny"}
	if !resp.Allowed {
		resp.Status = &struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{http.StatusForbidden, "denied by the e2e webhook (kforge.test/webhook=deny)"}
	}
	fmt.Printf("%s %s allowed=%t\n", o.Kind, o.Metadata.Name, resp.Allowed)
	rv.Request, rv.Response = nil, resp
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rv)
}
