// Command agent is the end-to-end tests' workload, built into a one-file image by the tests:
//
//	agent serve           HTTP on :8080, answering with the pod's hostname; logs one line per request;
//	                      on SIGTERM it goes on serving for 5 s (until its endpoint is gone
//	                      everywhere), then exits
//	agent lookup NAME     resolve NAME through the pod's DNS and print the addresses
//	agent get URL         GET URL and print the body
//	agent probe URL       GET URL every 100 ms on a new connection (2 s timeout), forever; logs
//	                      each failure and, every 2 s, "probe ok=N failed=M"
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
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

// probe requests url forever and counts the answers.
func probe(url string) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ok, failed := 0, 0
	last := time.Now()
	for {
		start := time.Now()
		resp, err := client.Get(url)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
		}
		if err != nil {
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
