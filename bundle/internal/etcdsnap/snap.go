package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/etcd/snapshotfile"
)

// Config is the configuration file, as kforge renders it (templates.EtcdSnapshot).
type Config struct {
	Endpoint   string `json:"endpoint"`   // the member's client URL on this master
	CA         string `json:"ca"`         // the etcd CA's certificate file
	Cert       string `json:"cert"`       // a client certificate of the etcd CA, and its key
	Key        string `json:"key"`        //
	Member     string `json:"member"`     // this master's name, for the records
	Kubernetes string `json:"kubernetes"` // the cluster's Kubernetes version, for the records
	Keep       int    `json:"keep"`       // how many snapshots to keep, the newest
}

func (c Config) check() error {
	if c.Endpoint == "" || c.CA == "" || c.Cert == "" || c.Key == "" || c.Member == "" {
		return errors.New("endpoint, ca, cert, key and member are required")
	}
	if c.Keep < 1 {
		return fmt.Errorf("keep %d: keep at least 1", c.Keep)
	}
	return nil
}

// Record is what NAME.json says of NAME.db: the fields of the workstation's snapshot records
// (kforge's state.Snapshot), so that a fetched snapshot is recorded as one taken there.
type Record struct {
	Name       string    `json:"-"`
	Time       time.Time `json:"time"`
	Member     string    `json:"member"`
	Etcd       string    `json:"etcd"`
	Kubernetes string    `json:"kubernetes"`
	Revision   int64     `json:"revision"`
	TotalKeys  int       `json:"totalKeys"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256"`
}

// Source is an etcd member to snapshot.
type Source interface {
	// Status is the member's version, or an error when it must not be snapshotted.
	Status(ctx context.Context) (string, error)
	Snapshot(ctx context.Context) (io.ReadCloser, error)
}

// partSuffix marks a snapshot still being streamed or verified; its file starts with a dot.
const partSuffix = ".part"

// Name is the base name of a snapshot taken at t (kforge's state.SnapshotName).
func Name(t time.Time) string { return "etcd-" + t.UTC().Format("20060102-150405.000") }

// Take streams one snapshot of src into dir and verifies it, then gives it its final name and
// writes its record; nothing under a final name is ever partial.
func Take(ctx context.Context, src Source, dir string, c Config, now time.Time) (Record, error) {
	version, err := src.Status(ctx)
	if err != nil {
		return Record{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Record{}, err
	}
	rec := Record{Name: Name(now), Time: now.UTC(), Member: c.Member, Etcd: version, Kubernetes: c.Kubernetes}
	part := filepath.Join(dir, "."+rec.Name+".db"+partSuffix)
	n, err := stream(ctx, src, part)
	if err != nil {
		os.Remove(part)
		return rec, err
	}
	info, err := snapshotfile.Verify(part)
	if err == nil && info.Size != n {
		err = fmt.Errorf("%d bytes streamed, %d in %s", n, info.Size, part)
	}
	if err != nil {
		os.Remove(part)
		return rec, err
	}
	rec.Revision, rec.TotalKeys, rec.Size, rec.SHA256 = info.Revision, info.TotalKeys, info.Size, info.SHA256
	if err := os.Rename(part, filepath.Join(dir, rec.Name+".db")); err != nil {
		return rec, err
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return rec, err
	}
	return rec, writeFile(filepath.Join(dir, rec.Name+".json"), append(data, '\n'))
}

// stream copies src's snapshot into file (0600: it holds every Secret etcd holds, encrypted
// or not), synced to disk.
func stream(ctx context.Context, src Source, file string) (int64, error) {
	rc, err := src.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, rc)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// writeFile writes data to file through a hidden file beside it, synced, then renamed.
func writeFile(file string, data []byte) error {
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+partSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Prune deletes all but the newest keep snapshots of dir with their records, snapshots
// without a record and the hidden files of interrupted runs; it returns the names it deleted.
func Prune(dir string, keep int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var recorded []string // names with a record, oldest first (the names sort by time)
	has := map[string]bool{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(name, ".") {
			recorded = append(recorded, name)
			has[name] = true
		}
	}
	slices.Sort(recorded)
	var gone []string
	var errs []error
	remove := func(file string) {
		if err := os.Remove(filepath.Join(dir, file)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			return
		}
		gone = append(gone, file)
	}
	for _, name := range recorded[:max(0, len(recorded)-keep)] {
		remove(name + ".json") // the record first: a snapshot left without one goes next time
		remove(name + ".db")
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasSuffix(n, partSuffix) || strings.HasSuffix(n, ".db") && !has[strings.TrimSuffix(n, ".db")] {
			remove(n)
		}
	}
	return gone, errors.Join(errs...)
}
