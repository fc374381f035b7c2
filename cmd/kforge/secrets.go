package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/kforge/kforge/tasks"
)

// SecretsCmd groups the commands on the encryption of the cluster's Secrets.
type SecretsCmd struct {
	RotateKey SecretsRotateKeyCmd `cmd:"" name:"rotate-key" help:"Replace the key that encrypts Secrets in etcd, with no API server restarted: add the new key, encrypt with it, write every Secret again, drop the old key. Resumable: run it again to finish an interrupted rotation."`
}

// SecretsRotateKeyCmd is kforge secrets rotate-key.
type SecretsRotateKeyCmd struct {
	AcceptNewHostKeys bool `help:"Trust hosts whose SSH key is not yet in known_hosts, and record their keys (trust on first use)."`
}

func (c *SecretsRotateKeyCmd) Run(ctx context.Context, s *streams, g *Globals, log *slog.Logger, dl *debugLog) (err error) {
	run, err := startClusterRun(ctx, "secrets-rotate-key", s, g, log, dl)
	if err != nil {
		return err
	}
	defer run.close(ctx, &err)
	o := run.options(g, log)
	o.AcceptNewHostKeys = c.AcceptNewHostKeys
	x := tasks.NewRotateKey(run.inv, o)
	defer x.Close()
	timings, err := run.run(ctx, x.Steps())
	if err != nil {
		return err
	}
	run.printer.Summary(fmt.Sprintf("Secrets of cluster %s are encrypted with key %s; %d written again; key %s is gone from the masters and the state dir",
		run.inv.Name, x.New, x.Rewritten, x.Old), time.Since(run.start), timings)
	return nil
}
