package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/tasks"
)

// exitExpiring is certs check's exit code when a certificate expires within --warn.
const exitExpiring = 5

// CertsCmd groups the commands on the cluster's certificates.
type CertsCmd struct {
	Check    CertsCheckCmd    `cmd:"" help:"List every certificate the cluster depends on (state dir, masters' PKI and kubeconfigs, kubelets' client and serving certificates, issued user kubeconfigs): issuer, expiry, drift. Exits 5 when one expires within --warn."`
	Renew    CertsRenewCmd    `cmd:"" help:"Re-issue leaf certificates centrally, push them and restart exactly the static pods that use them, one master at a time; works over SSH alone when they have already expired."`
	RotateCA CertsRotateCACmd `cmd:"" name:"rotate-ca" help:"Replace CAs without downtime: trust old and new everywhere, re-issue every certificate from the new one, then drop the old one; an interrupted run is finished by running it again."`
}

// CertsCheckCmd is kforge certs check.
type CertsCheckCmd struct {
	Warn              string `default:"30d" help:"Exit 5 when a certificate expires within this duration (such as 30d, 12h)."`
	AcceptNewHostKeys bool   `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *CertsCheckCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	warn, err := inventory.ParseDuration(c.Warn)
	if err != nil {
		return usageError{fmt.Errorf("--warn: %v", err)}
	}
	run, err := startClusterRun(ctx, "certs-check", s.queryProgress(), g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys = c.AcceptNewHostKeys
	x := tasks.NewCertsCheck(run.inv, o)
	defer x.Close()
	if _, err := run.run(ctx, x.Steps()); err != nil {
		return err
	}
	now := time.Now()
	expiring := x.Expiring(now, time.Duration(warn))
	if g.Output == "json" {
		doc := map[string]any{"certificates": x.Report, "unreachable": x.Unreachable, "expiring": len(expiring)}
		if err := writeDocument(s, doc); err != nil {
			return err
		}
	} else {
		writeCertsReport(s.Out, x.Report, now)
	}
	switch {
	case len(x.Unreachable) > 0:
		var hosts []string
		for h, why := range x.Unreachable {
			hosts = append(hosts, h+" ("+why+")")
		}
		return fmt.Errorf("could not read the certificates of %s", strings.Join(hosts, ", "))
	case len(expiring) > 0:
		return certsExpiring{n: len(expiring), warn: c.Warn}
	}
	return nil
}

// writeCertsReport prints the report as a table, then each certificate's drift.
func writeCertsReport(w io.Writer, report []pki.Inspection, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHERE\tCERTIFICATE\tEXPIRES\tLEFT\tISSUER\tDRIFT")
	for _, in := range report {
		if in.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t%s\n", in.Where, in.Name, strings.ToUpper(in.Error))
			continue
		}
		drift := "-"
		if len(in.Drift) > 0 {
			drift = strings.Join(in.Drift, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Where, in.Name, in.NotAfter.Format("2006-01-02 15:04"), leftString(in.Left(now)), in.Issuer, drift)
	}
	tw.Flush()
}

// leftString is a validity left in days, or in hours and minutes when under two days;
// "EXPIRED" once it is over.
func leftString(d time.Duration) string {
	switch {
	case d <= 0:
		return "EXPIRED"
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
	return d.Truncate(time.Minute).String()
}

// certsExpiring makes certs check exit 5 after printing its report.
type certsExpiring struct {
	n    int
	warn string
}

func (e certsExpiring) Error() string {
	return fmt.Sprintf("%d certificates expire within %s or have expired: kforge certs renew --all renews them", e.n, e.warn)
}
func (certsExpiring) ExitCode() int { return exitExpiring }

// CertsRenewCmd is kforge certs renew.
type CertsRenewCmd struct {
	Names             []string      `arg:"" optional:"" name:"name" help:"Certificates to renew, by kubeadm's names (apiserver, etcd-server, admin.conf, …)."`
	All               bool          `help:"Renew every leaf certificate."`
	Timeout           time.Duration `default:"5m" help:"How long each wait on the cluster may take."`
	AcceptNewHostKeys bool          `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *CertsRenewCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	sel, err := tasks.RenewSelector(c.Names, c.All)
	if err != nil {
		return usageError{err}
	}
	run, err := startClusterRun(ctx, "certs-renew", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys, o.Timeout = c.AcceptNewHostKeys, c.Timeout
	x := tasks.NewCertsRenew(run.inv, o, sel)
	defer x.Close()
	timings, err := run.run(ctx, x.Steps())
	if err != nil {
		return err
	}
	run.printer.Summary(fmt.Sprintf("renewed %d certificates of cluster %s: %s", len(x.Renewed), run.inv.Name, strings.Join(x.Renewed, ", ")), time.Since(run.start), timings)
	return nil
}

// CertsRotateCACmd is kforge certs rotate-ca.
type CertsRotateCACmd struct {
	CA                string        `name:"ca" default:"all" help:"Which CAs to replace: cluster, etcd, front-proxy or all (comma-separated for several)."`
	Timeout           time.Duration `default:"5m" help:"How long each wait on the cluster may take."`
	AcceptNewHostKeys bool          `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *CertsRotateCACmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	cas, err := tasks.CAsFlag(c.CA)
	if err != nil {
		return usageError{err}
	}
	run, err := startClusterRun(ctx, "certs-rotate-ca", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys, o.Timeout = c.AcceptNewHostKeys, c.Timeout
	x := tasks.NewRotateCA(run.inv, o, cas)
	defer x.Close()
	timings, err := run.run(ctx, x.Steps())
	if err != nil {
		return err
	}
	var retired []string
	for _, name := range cas {
		retired = append(retired, name+" "+x.Retired[name])
	}
	msg := fmt.Sprintf("rotated %s of cluster %s; retired %s; %d addon pods replaced; service-account tokens stay valid (signed with sa.key, which a CA rotation keeps)",
		strings.Join(cas, ", "), run.inv.Name, strings.Join(retired, ", "), len(x.Restarted))
	if len(x.StaleUsers) > 0 {
		msg += "\nuser kubeconfigs signed by the old CA, to replace with kforge kubeconfig --user NAME: " + strings.Join(x.StaleUsers, ", ")
	}
	run.printer.Summary(msg, time.Since(run.start), timings)
	return nil
}
