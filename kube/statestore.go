package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// A cluster's state dir kept in a management cluster (kforge controller, and the CLI's
// --state-dir kube://NAMESPACE/NAME) instead of on one workstation's disk:
//
//	Secret    kforge-<name>-state       every file of the state dir (the PKI, admin.conf,
//	                                    the bootstrap token, the hosts record, the issued
//	                                    kubeconfigs, the snapshots' records), one key each: its
//	                                    path with "/" written "__" (encrypted at rest by the
//	                                    management cluster's API servers)
//	ConfigMap kforge-<name>-run-<start> one run record (redacted); the newest StateRunsKept kept
//	Lease     kforge-<name>-lock        held by the run in progress, renewed every
//	                                    StateLeaseRenew; a holder gone for StateLeaseDuration
//	                                    loses it to the next run
//
// The run itself works on a private copy in a directory of its own (OpenState), written back
// after every step (Sync) and when it ends (Close): the code that reads and writes a state
// dir is the same for both kinds. Snapshot files (etcd-*.db) and debug logs stay in the copy
// (a Secret holds 1 MiB); their records and the run records do not.
const (
	StateLeaseDuration = 40 * time.Second
	StateLeaseRenew    = 10 * time.Second
	StateRunsKept      = 20
	// stateLabel marks the objects of one cluster's state with its name.
	stateLabel = "kforge.dev/state"
	// stateMaxBytes is what the Secret may hold: etcd's request limit is 1.5 MiB.
	stateMaxBytes = 1 << 20
)

// StateSecretName, StateLeaseName and stateRunName are the names of cluster name's objects.
func StateSecretName(name string) string { return "kforge-" + name + "-state" }
func StateLeaseName(name string) string  { return "kforge-" + name + "-lock" }

var runNameChars = regexp.MustCompile(`[^a-z0-9-]+`)

func stateRunName(name, file string) string {
	return "kforge-" + name + "-run-" + strings.Trim(runNameChars.ReplaceAllString(strings.ToLower(strings.TrimSuffix(file, ".json")), "-"), "-")
}

// StateLockedError is a cluster whose state another run holds.
type StateLockedError struct {
	Namespace, Name, Holder string
	Until                   time.Time
}

func (e *StateLockedError) Error() string {
	return fmt.Sprintf("the state of cluster %s/%s is in use by %s (its lease %s runs until %s unless renewed): wait for that run to finish (two runs on one cluster would issue certificates and change hosts at once)",
		e.Namespace, e.Name, e.Holder, StateLeaseName(e.Name), e.Until.UTC().Format(time.RFC3339))
}

// StateStore is one run's hold on a cluster's state in a management cluster.
type StateStore struct {
	client    kubernetes.Interface
	ns, name  string
	identity  string
	dir       string
	locked    bool
	mu        sync.Mutex        // one Sync at a time
	synced    map[string][]byte // the Secret's data as last read or written
	runs      map[string]bool   // run records already in ConfigMaps
	ctx       context.Context   // cancelled when the lease is lost
	cancel    context.CancelCauseFunc
	renewDone chan struct{}
}

// StateOptions say how a run holds the state.
type StateOptions struct {
	// Identity names the holder in the lease and in errors (host and process, or the
	// controller's pod).
	Identity string
	// Lock takes the lease for the whole run (the commands that change a cluster); without it
	// the state is only read.
	Lock bool
	// Dir is where the private copy is made (a new directory in it; default os.TempDir()).
	Dir string
}

// OpenState takes the state of cluster ns/name for one run: the lease when o.Lock (a
// *StateLockedError when another run holds it), then a private copy of every file in a new
// directory (Dir). The returned store's Context is cancelled if the lease is lost.
func OpenState(ctx context.Context, client kubernetes.Interface, ns, name string, o StateOptions) (*StateStore, error) {
	dir, err := os.MkdirTemp(o.Dir, "kforge-state-")
	if err != nil {
		return nil, fmt.Errorf("state of %s/%s: %w", ns, name, err)
	}
	s := &StateStore{client: client, ns: ns, name: name, identity: o.Identity, dir: dir, locked: o.Lock,
		synced: map[string][]byte{}, runs: map[string]bool{}}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	fail := func(err error) (*StateStore, error) {
		s.cancel(err)
		os.RemoveAll(dir)
		return nil, err
	}
	if o.Lock {
		if err := s.acquire(ctx); err != nil {
			return fail(err)
		}
	}
	if err := s.read(ctx); err != nil {
		if o.Lock {
			s.release(context.WithoutCancel(ctx))
		}
		return fail(err)
	}
	if o.Lock {
		s.renewDone = make(chan struct{})
		go s.renew()
	}
	return s, nil
}

// Dir is the private copy: use it as the run's state dir (state.At).
func (s *StateStore) Dir() string { return s.dir }

// Context is cancelled, with the cause, when the lease is lost to another run.
func (s *StateStore) Context() context.Context { return s.ctx }

func (s *StateStore) acquire(ctx context.Context) error {
	leases := s.client.CoordinationV1().Leases(s.ns)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(StateLeaseDuration / time.Second)
	l, err := leases.Get(ctx, StateLeaseName(s.name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: StateLeaseName(s.name), Namespace: s.ns, Labels: map[string]string{stateLabel: s.name}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &s.identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return s.acquire(ctx)
		}
		return s.wrap("take the lease", err)
	}
	if err != nil {
		return s.wrap("read the lease", err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" && *h != s.identity && l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		until := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		if time.Now().Before(until) {
			return &StateLockedError{Namespace: s.ns, Name: s.name, Holder: *h, Until: until}
		}
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &s.identity, &secs, &now, &now
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
		return s.acquire(ctx) // another run took or renewed it meanwhile: look again
	} else if err != nil {
		return s.wrap("take the lease", err)
	}
	return nil
}

// renew renews the lease every StateLeaseRenew until Close; a lease another run holds now, or
// one not renewed within its duration, cancels Context.
func (s *StateStore) renew() {
	defer close(s.renewDone)
	last := time.Now()
	t := time.NewTicker(StateLeaseRenew)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, StateLeaseRenew)
		err := s.renewOnce(ctx)
		cancel()
		var lost *StateLockedError
		switch {
		case errors.As(err, &lost):
			s.cancel(err)
			return
		case err == nil:
			last = time.Now()
		case time.Since(last) > StateLeaseDuration-StateLeaseRenew:
			s.cancel(fmt.Errorf("the lease %s/%s was not renewed for %s, so another run may take it: %w", s.ns, StateLeaseName(s.name), time.Since(last).Round(time.Second), err))
			return
		}
	}
}

func (s *StateStore) renewOnce(ctx context.Context) error {
	leases := s.client.CoordinationV1().Leases(s.ns)
	l, err := leases.Get(ctx, StateLeaseName(s.name), metav1.GetOptions{})
	if err != nil {
		return err
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != s.identity {
		holder := "nobody"
		if h != nil && *h != "" {
			holder = *h
		}
		return &StateLockedError{Namespace: s.ns, Name: s.name, Holder: holder}
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// release gives the lease up, when this run still holds it.
func (s *StateStore) release(ctx context.Context) error {
	leases := s.client.CoordinationV1().Leases(s.ns)
	l, err := leases.Get(ctx, StateLeaseName(s.name), metav1.GetOptions{})
	if err != nil {
		return s.wrap("release the lease", err)
	}
	if h := l.Spec.HolderIdentity; h == nil || *h != s.identity {
		return nil
	}
	empty := ""
	l.Spec.HolderIdentity, l.Spec.RenewTime = &empty, nil
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return s.wrap("release the lease", err)
}

// read makes the private copy: the Secret's files and the run records.
func (s *StateStore) read(ctx context.Context) error {
	sec, err := s.client.CoreV1().Secrets(s.ns).Get(ctx, StateSecretName(s.name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return s.wrap("read the state Secret", err)
	default:
		for key, data := range sec.Data {
			rel, err := stateFile(key)
			if err != nil {
				return s.wrap("read the state Secret", err)
			}
			if err := fsx.WriteFile(filepath.Join(s.dir, rel), data, 0o600); err != nil {
				return err
			}
			s.synced[key] = data
		}
	}
	runs, err := s.client.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + s.name})
	if err != nil {
		return s.wrap("read the run records", err)
	}
	for _, cm := range runs.Items {
		for file, data := range cm.Data {
			if filepath.Base(file) != file {
				continue
			}
			if err := fsx.WriteFile(filepath.Join(s.dir, "runs", file), []byte(data), 0o600); err != nil {
				return err
			}
			s.runs[file] = true
		}
	}
	return nil
}

// Sync writes back what changed in the private copy since the last Sync: the Secret when a
// file of it changed, a ConfigMap for each new run record. The run calls it after each step.
func (s *StateStore) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := map[string][]byte{}
	var runs []string
	size := 0
	err := filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.dir, path)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			if rel == "logs" {
				return fs.SkipDir
			}
			return nil
		case strings.HasPrefix(d.Name(), "."):
			return nil // the lock, and files being written (fsx)
		case strings.HasPrefix(rel, "snapshots/") && strings.HasSuffix(rel, ".db"):
			return nil // too large for a Secret; the record is kept
		case strings.HasPrefix(rel, "runs/"):
			if !s.runs[d.Name()] {
				runs = append(runs, d.Name())
			}
			return nil
		}
		key, err := stateKey(rel)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		data[key] = b
		size += len(b)
		return nil
	})
	if err != nil {
		return s.wrap("read the state copy", err)
	}
	if size > stateMaxBytes {
		return s.wrap("write the state Secret", fmt.Errorf("its files hold %d bytes, more than a Secret can (%d)", size, stateMaxBytes))
	}
	if !maps.EqualFunc(data, s.synced, bytes.Equal) {
		if err := s.writeSecret(ctx, data); err != nil {
			return err
		}
		s.synced = data
	}
	slices.Sort(runs)
	for _, file := range runs {
		b, err := os.ReadFile(filepath.Join(s.dir, "runs", file))
		if err != nil {
			return s.wrap("read a run record", err)
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: stateRunName(s.name, file), Namespace: s.ns, Labels: map[string]string{stateLabel: s.name}},
			Data:       map[string]string{file: string(b)},
		}
		if _, err := s.client.CoreV1().ConfigMaps(s.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return s.wrap("write run record "+file, err)
		}
		s.runs[file] = true
	}
	if len(runs) > 0 {
		return s.pruneRuns(ctx)
	}
	return nil
}

func (s *StateStore) writeSecret(ctx context.Context, data map[string][]byte) error {
	secrets := s.client.CoreV1().Secrets(s.ns)
	sec, err := secrets.Get(ctx, StateSecretName(s.name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: StateSecretName(s.name), Namespace: s.ns, Labels: map[string]string{stateLabel: s.name}},
			Type:       "kforge.dev/state", Data: data,
		}, metav1.CreateOptions{})
		return s.wrap("write the state Secret", err)
	}
	if err != nil {
		return s.wrap("write the state Secret", err)
	}
	sec.Data = data
	_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	return s.wrap("write the state Secret", err)
}

// pruneRuns keeps the newest StateRunsKept run records (their names sort by start).
func (s *StateStore) pruneRuns(ctx context.Context) error {
	cms, err := s.client.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: stateLabel + "=" + s.name})
	if err != nil {
		return s.wrap("list the run records", err)
	}
	names := make([]string, 0, len(cms.Items))
	for _, cm := range cms.Items {
		names = append(names, cm.Name)
	}
	slices.Sort(names)
	for _, n := range names[:max(0, len(names)-StateRunsKept)] {
		if err := s.client.CoreV1().ConfigMaps(s.ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return s.wrap("remove an old run record", err)
		}
	}
	return nil
}

// Close writes back what is left (Sync), gives up the lease and removes the private copy.
// The copy is removed even when writing back fails, so no key stays on disk; the error says
// what was not written.
func (s *StateStore) Close(ctx context.Context) error {
	err := s.Sync(ctx)
	if s.locked {
		lost := context.Cause(s.ctx)
		s.cancel(errors.New("closed"))
		<-s.renewDone
		if lost == nil {
			err = errors.Join(err, s.release(ctx))
		}
	} else {
		s.cancel(errors.New("closed"))
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

func (s *StateStore) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("state of cluster %s/%s: %s: %w", s.ns, s.name, what, err)
}

// stateKey is the Secret key of a state file's path ("pki/etcd/ca.key" → "pki__etcd__ca.key");
// stateFile is its inverse.
func stateKey(rel string) (string, error) {
	if strings.Contains(rel, "__") || !secretKey.MatchString(strings.ReplaceAll(rel, "/", "")) {
		return "", fmt.Errorf("state file %q cannot be a Secret key", rel)
	}
	return strings.ReplaceAll(rel, "/", "__"), nil
}

func stateFile(key string) (string, error) {
	rel := strings.ReplaceAll(key, "__", "/")
	if !secretKey.MatchString(key) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("key %q names no file of a state dir", key)
	}
	return rel, nil
}

var secretKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// DeleteState deletes the state of cluster ns/name: its Secret, run records and lease (what a
// reset with its state purged leaves of a cluster).
func DeleteState(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	ignore := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	err := errors.Join(
		ignore(client.CoreV1().Secrets(ns).Delete(ctx, StateSecretName(name), metav1.DeleteOptions{})),
		ignore(client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: stateLabel + "=" + name})),
		ignore(client.CoordinationV1().Leases(ns).Delete(ctx, StateLeaseName(name), metav1.DeleteOptions{})))
	if err != nil {
		return fmt.Errorf("state of cluster %s/%s: delete: %w", ns, name, err)
	}
	return nil
}

// SyncAfterSteps wraps report so that the state is written back when each step is done; when
// that fails, fail is called with the error, which ends the run before its next step (a step
// that pushed credentials the management cluster does not hold must not be followed by more).
func (s *StateStore) SyncAfterSteps(ctx context.Context, report progress.Reporter, fail context.CancelCauseFunc) progress.Reporter {
	return func(e progress.Event) {
		report(e)
		if e.Kind == progress.Done {
			if err := s.Sync(ctx); err != nil {
				fail(err)
			}
		}
	}
}
