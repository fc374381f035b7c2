package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/kube"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/templates"
)

// RotateKey is one `kforge secrets rotate-key`: the key that encrypts Secrets in etcd replaced
// without restarting an API server, in the phases of pki.KeyPhase, each recorded in the state
// dir before it is rolled out and done once every master's API server has loaded it:
//
//   - add: the new key is known to every API server, the old one still encrypts;
//   - write: the new key encrypts;
//   - rewrite: every Secret is written again through the API, and etcd holds none under the
//     old key any more;
//   - drop: the old key is removed from every master and from the state dir.
//
// An interrupted rotation is finished by running the command again; plan and apply say that
// one is in progress, and apply keeps the keys as its phase has them.
type RotateKey struct {
	rc   *runContext
	keys *pki.EncryptionKeys // start: the keys as the current phase has them
	// Rewritten counts the Secrets written again; Old is the key dropped.
	Rewritten int
	Old, New  string
}

// NewRotateKey prepares a rotation of c's encryption key.
func NewRotateKey(c *inventory.Cluster, o Options) *RotateKey {
	return &RotateKey{rc: newRunContext(c, c.Nodes(), o)}
}

// Close ends every connection.
func (x *RotateKey) Close() { x.rc.fleet.Close() }

// keyReloadTimeout bounds the wait for every API server to load a new encryption
// configuration: they look at the file once a minute.
const keyReloadTimeout = 3 * time.Minute

// Steps is secrets rotate-key, top to bottom.
func (x *RotateKey) Steps() []Step {
	rc := x.rc
	masters := rc.fleet.Names(inventory.RoleMaster)
	var l list
	l.add("connect", OnHosts, masters, func(ctx context.Context, r progress.Reporter) error {
		return reachAll(ctx, rc.fleet, inventory.RoleMaster, r)
	}, "connect to %s over SSH", count(len(masters), "master"))
	l.add("credentials", OnWorkstation, nil, x.credentials, "read the cluster's credentials from the state dir (nothing is written)")
	l.add("start", OnWorkstation, nil, x.start, "make a new key in %s, or resume the rotation in progress", rc.o.State.PKI())
	l.add("add", OnHosts, masters, x.phase(pki.KeyAdd), "every API server knows the new key; the old one still encrypts (each loads the file within a minute, without a restart)")
	l.add("write", OnHosts, masters, x.phase(pki.KeyWrite), "the new key encrypts on every API server; the old one still decrypts")
	l.add("rewrite", ThroughAPI, nil, x.rewrite, "write every Secret again through the API, then read etcd: no Secret is left under the old key")
	l.add("drop", OnHosts, masters, x.phase(pki.KeyDrop), "the old key is removed from every master's configuration, then from the state dir")
	return l
}

func (x *RotateKey) credentials(context.Context, progress.Reporter) error {
	rc := x.rc
	if p := rc.inv.Security.EncryptionAtRest; p == inventory.EncryptionNone {
		return fmt.Errorf("security.encryptionAtRest is none: Secrets are stored in plain text, there is no key to rotate; set secretbox or aescbc and run kforge apply first")
	}
	set, _, err := pki.PlanCluster(rc.inv, rc.o.InventoryDir, rc.o.State.PKI(), rc.o.Now(), rc.o.Rand)
	if err != nil {
		return fmt.Errorf("PKI in %s: %w", rc.o.State.PKI(), err)
	}
	rc.setCredentials(set, kube.BootstrapToken{})
	return nil
}

func (x *RotateKey) start(_ context.Context, r progress.Reporter) error {
	ks, err := pki.StartKeyRotation(x.rc.o.State.PKI(), x.rc.o.Now(), x.rc.o.Rand)
	if err != nil {
		return err
	}
	x.keys, x.New = ks, ks.Rotation.New
	for _, k := range ks.Keys {
		if k.Name != x.New {
			x.Old = k.Name
		}
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("new key %s (replacing %s), phase %s since %s", x.New, x.Old, ks.Rotation.Phase, ks.Rotation.Started.Format(time.RFC3339))})
	return nil
}

// order is where each phase stands among the others.
var keyPhaseOrder = map[pki.KeyPhase]int{pki.KeyAdd: 0, pki.KeyWrite: 1, pki.KeyRewrite: 2, pki.KeyDrop: 3}

// phase rolls phase p out: the keys as p has them are recorded in the state dir, written to
// every master's encryption configuration, and p is done once every API server has loaded it.
// A phase an earlier run finished is skipped. After drop, the rotation is over.
func (x *RotateKey) phase(p pki.KeyPhase) func(context.Context, progress.Reporter) error {
	return func(ctx context.Context, r progress.Reporter) error {
		rc := x.rc
		if keyPhaseOrder[x.keys.Rotation.Phase] > keyPhaseOrder[p] {
			r(progress.Event{Kind: progress.Info, Message: "done by an earlier run"})
			return nil
		}
		ks, err := x.keys.Advance(p)
		if err != nil {
			return err
		}
		if err := pki.SaveEncryptionKeys(rc.o.State.PKI(), ks); err != nil {
			return err
		}
		x.keys = ks
		if err := x.rollOut(ctx, r, ks); err != nil {
			return err
		}
		if p == pki.KeyDrop {
			done := &pki.EncryptionKeys{Keys: ks.Keys}
			if err := pki.SaveEncryptionKeys(rc.o.State.PKI(), done); err != nil {
				return err
			}
			x.keys = done
		}
		return nil
	}
}

// rollOut writes the encryption configuration of ks to every master and waits until each API
// server has loaded it (its metrics name the file's sha256).
func (x *RotateKey) rollOut(ctx context.Context, r progress.Reporter, ks *pki.EncryptionKeys) error {
	rc := x.rc
	data, err := templates.EncryptionConfig(rc.inv.Security.EncryptionAtRest, ks)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	files := newHostFiles()
	g, ctx := errgroup.WithContext(ctx)
	for _, m := range rc.inv.Masters {
		files.set(m.Name, []templates.File{{Path: hostpath.EncryptionConfig, Mode: 0o600, Data: data}})
		g.Go(func() error {
			if err := push(ctx, files, rc.fleet.Host(m.Name), nil); err != nil {
				return err
			}
			cfg, err := restConfigVia(rc.inv, rc.set, rc.fleet, "admin.conf", m)
			if err != nil {
				return err
			}
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			start, last := time.Now(), ""
			for {
				got, err := kube.EncryptionConfigHash(ctx, c)
				if err == nil && got == want {
					r(progress.Event{Kind: progress.HostDone, Host: m.Name, Message: fmt.Sprintf("the API server loaded it after %s", time.Since(start).Round(time.Second))})
					return nil
				}
				last = got
				if err != nil {
					last = err.Error()
				}
				if time.Since(start) > keyReloadTimeout {
					return fmt.Errorf("host %s: its API server did not load the new encryption configuration %s within %s (it reads the file every minute; it says it uses sha256 %q); look at its log (crictl logs on the host) for why, then run kforge secrets rotate-key again", m.Name, hostpath.EncryptionConfig, keyReloadTimeout, last)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(2 * time.Second):
				}
			}
		})
	}
	return g.Wait()
}

// rewrite writes every Secret again, then reads etcd through the first master: each Secret's
// value must start with the new key's prefix.
func (x *RotateKey) rewrite(ctx context.Context, r progress.Reporter) error {
	rc := x.rc
	if keyPhaseOrder[x.keys.Rotation.Phase] > keyPhaseOrder[pki.KeyRewrite] {
		r(progress.Event{Kind: progress.Info, Message: "done by an earlier run"})
		return nil
	}
	ks, err := x.keys.Advance(pki.KeyRewrite)
	if err != nil {
		return err
	}
	if err := pki.SaveEncryptionKeys(rc.o.State.PKI(), ks); err != nil {
		return err
	}
	x.keys = ks
	api, err := rc.clients()
	if err != nil {
		return err
	}
	if x.Rewritten, err = kube.RewriteSecrets(ctx, api.Typed, nil); err != nil {
		return err
	}
	e, err := newEtcdClient(ctx, rc.fleet, rc.set, rc.inv.Masters[0].Name)
	if err != nil {
		return err
	}
	defer e.Close()
	prefix := "k8s:enc:" + rc.inv.Security.EncryptionAtRest + ":v1:" + x.New + ":"
	total, left, err := e.Unprefixed(ctx, "/registry/secrets/", []byte(prefix))
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("%d of %d Secrets in etcd are not encrypted with the new key %s after they were written again: %s; run kforge secrets rotate-key again", len(left), total, x.New, strings.Join(left[:min(len(left), 5)], ", "))
	}
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("%d Secrets written again; etcd holds all %d under the new key", x.Rewritten, total)})
	return nil
}
