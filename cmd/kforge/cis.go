package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/kforge/kforge/cis"
	"github.com/kforge/kforge/tasks"
)

// CISCmd is kforge cis.
type CISCmd struct {
	AcceptNewHostKeys bool `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *CISCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	run, err := startClusterRun(ctx, "cis", s.queryProgress(), g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys = c.AcceptNewHostKeys
	x := tasks.NewCIS(run.inv, o)
	defer x.Close()
	if _, err := run.run(ctx, x.Steps()); err != nil {
		return err
	}
	if g.Output == "json" {
		if err := writeDocument(s, x.Results); err != nil {
			return err
		}
	} else {
		writeCISReport(s.Out, x.Results)
	}
	if n := scoredFailures(x.Results); n > 0 {
		return cisFailed{n}
	}
	return nil
}

// writeCISReport prints one line per check and host, then each host's counts.
func writeCISReport(w io.Writer, rs []cis.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tCHECK\tRESULT\tSCORED\tWHAT\tFOUND")
	type counts struct{ pass, fail, scoredFail, accepted int }
	per := map[string]*counts{}
	var order []string
	for _, r := range rs {
		res, scored := "pass", "no"
		switch {
		case !r.Pass && r.Accepted != "":
			res = "fail (accepted)"
			r.Got += "; accepted: " + r.Accepted
		case !r.Pass:
			res = "FAIL"
		}
		if r.Scored {
			scored = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Host, r.ID, res, scored, r.Text, r.Got)
		c := per[r.Host]
		if c == nil {
			c = &counts{}
			per[r.Host] = c
			order = append(order, r.Host)
		}
		if !r.Pass && r.Accepted != "" {
			c.accepted++
		}
		switch {
		case r.Pass:
			c.pass++
		case r.Scored:
			c.fail++
			c.scoredFail++
		default:
			c.fail++
		}
	}
	tw.Flush()
	for _, h := range order {
		c := per[h]
		fmt.Fprintf(w, "%s: %d passed, %d failed (%d of them scored, %d accepted: kforge fails them on purpose)\n", h, c.pass, c.fail, c.scoredFail, c.accepted)
	}
}

// scoredFailures counts the scored checks that failed, but for those kforge fails on purpose.
func scoredFailures(rs []cis.Result) int {
	n := 0
	for _, r := range rs {
		if !r.Pass && r.Scored && r.Accepted == "" {
			n++
		}
	}
	return n
}

// cisFailed makes kforge cis exit 1 when a scored check failed.
type cisFailed struct{ n int }

func (e cisFailed) Error() string {
	return fmt.Sprintf("%s of the CIS Kubernetes Benchmark failed, listed above with what was found; docs/security.md says what each checks and how kforge meets it", plural(e.n, "scored check"))
}
