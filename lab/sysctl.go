package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// inotifyLimit is the one machine-wide setting the lab may change: every booted systemd host
// holds several inotify instances of root, and fs.inotify.max_user_instances (128 by default)
// counts all of root's processes on the machine together. When the limit is too low for the
// wanted hosts, new hosts' systemd dies silently, so the limit is raised before they start, and
// restored when the last lab is gone if nobody changed it meanwhile.
const inotifyLimit = "/proc/sys/fs/inotify/max_user_instances"

// inotifyPerHost is what one host holds once it is a cluster node, with headroom: about 7 idle
// (systemd and its services), and the kubelet's cAdvisor and file watchers, containerd and the
// pods' processes on top. With 10 a host, a lab of 21 ran out when its kubelets started
// ("Failed to start cAdvisor" err="inotify_init: too many open files" on 13 of them).
const inotifyPerHost = 32

// inotifySaved remembers the original value and the one the lab set.
type inotifySaved struct {
	Original int `json:"original"`
	Set      int `json:"set"`
}

func inotifyFile() string { return filepath.Join(RegistryDir, "inotify.json") }

// raiseInotify makes room for hosts lab hosts (all labs', including the new ones) on top of what
// the machine uses now. Called under the registry lock.
func raiseInotify(hosts int, r progress.Reporter) error {
	cur, err := readInt(inotifyLimit)
	if err != nil {
		return fmt.Errorf("reading %s: %w", inotifyLimit, err)
	}
	need := inotifyInUse() + hosts*inotifyPerHost + 16
	if need <= cur {
		return nil
	}
	var saved inotifySaved
	b, err := os.ReadFile(inotifyFile())
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &saved); err != nil {
			return fmt.Errorf("reading %s: %w", inotifyFile(), err)
		}
	case errors.Is(err, fs.ErrNotExist):
		saved.Original = cur
	default:
		return err
	}
	if err := os.WriteFile(inotifyLimit, []byte(strconv.Itoa(need)), 0o644); err != nil {
		return fmt.Errorf("raising %s from %d to %d for %d lab hosts: %w", inotifyLimit, cur, need, hosts, err)
	}
	saved.Set = need
	b, _ = json.Marshal(saved)
	r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("raised fs.inotify.max_user_instances from %d to %d for the lab hosts; restored when the last lab is down", cur, need)})
	return fsx.WriteFile(inotifyFile(), b, 0o644)
}

// restoreInotify puts back the original limit if the lab raised it and it still holds the
// lab's value. Called under the registry lock when no lab is left.
func restoreInotify(r progress.Reporter) error {
	b, err := os.ReadFile(inotifyFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved inotifySaved
	if err := json.Unmarshal(b, &saved); err != nil {
		return fmt.Errorf("reading %s: %w", inotifyFile(), err)
	}
	cur, err := readInt(inotifyLimit)
	if err != nil {
		return err
	}
	if cur == saved.Set {
		if err := os.WriteFile(inotifyLimit, []byte(strconv.Itoa(saved.Original)), 0o644); err != nil {
			return fmt.Errorf("restoring %s to %d: %w", inotifyLimit, saved.Original, err)
		}
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("restored fs.inotify.max_user_instances to %d", saved.Original)})
	} else {
		r(progress.Event{Kind: progress.Info, Message: fmt.Sprintf("left fs.inotify.max_user_instances at %d: it was changed by someone else since the lab set it to %d (it was %d before)", cur, saved.Set, saved.Original)})
	}
	return os.Remove(inotifyFile())
}

type statfs struct{ syscall.Statfs_t }

const overlayfsMagic = 0x794c7630

func statFS(dir string, st *statfs) error { return syscall.Statfs(dir, &st.Statfs_t) }

func (s *statfs) isOverlay() bool { return s.Type == overlayfsMagic }
