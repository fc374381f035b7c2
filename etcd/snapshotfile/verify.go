// Package snapshotfile verifies an etcd snapshot file with etcdutl's library. It is kforge's
// and also kforge-etcd-snapshot's, the program the masters' timers run (bundle/internal/etcdsnap),
// whose scratch module gets this file (Source) as its copy of the package: so this file imports
// nothing of kforge's.
package snapshotfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Info is what a verified snapshot file says of itself.
type Info struct {
	Size      int64  // bytes of the file: the database and its 32-byte sha256
	SHA256    string // hex sha256 of the whole file, for records and transfers
	Revision  int64  // the key-value store's revision when the snapshot was cut
	TotalKeys int    // keys in the key-value store
	Hash      uint32 // etcdutl's hash of the database's buckets (`etcdutl snapshot status`)
	Storage   string // the database's storage version, e.g. "3.6.0"
}

// Verify checks a snapshot file as `etcdutl snapshot restore` and `etcdutl snapshot
// status` do, with etcdutl's own library: the sha256 that etcd appends to the database it
// streams must match the database (a flipped byte or a truncated copy fails here), and the
// database must pass bbolt's integrity check. It reads the file twice, in constant memory.
func Verify(path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	info := Info{Size: st.Size()}
	// etcd's snapshot is the database (a multiple of 512 bytes) plus its sha256.
	if info.Size < 512+sha256.Size || info.Size%512 != sha256.Size {
		return info, &Error{Path: path, Seen: fmt.Sprintf("%d bytes: not a database followed by its sha256 (a truncated or foreign file)", info.Size)}
	}
	db, whole := sha256.New(), sha256.New()
	if _, err := io.CopyN(io.MultiWriter(db, whole), f, info.Size-sha256.Size); err != nil {
		return info, fmt.Errorf("read %s: %w", path, err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return info, fmt.Errorf("read %s: %w", path, err)
	}
	whole.Write(trailer)
	info.SHA256 = hex.EncodeToString(whole.Sum(nil))
	if got := db.Sum(nil); string(got) != string(trailer) {
		return info, &Error{Path: path, Seen: fmt.Sprintf("the database's sha256 is %x, but the snapshot says %x: the file was changed or damaged after etcd wrote it", got, trailer)}
	}
	st2, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return info, &Error{Path: path, Seen: "the database fails etcdutl's status check: " + err.Error()}
	}
	info.Revision, info.TotalKeys, info.Hash, info.Storage = st2.Revision, st2.TotalKey, st2.Hash, st2.Version
	return info, nil
}

// Error is a snapshot file that is refused, and why.
type Error struct {
	Path string
	Seen string
}

func (e *Error) Error() string {
	return fmt.Sprintf("snapshot %s is refused: %s", e.Path, e.Seen)
}

// Details are the message and what to do, for kforge's error printer.
func (e *Error) Details() []string {
	return []string{e.Error(), "  hint: take a new snapshot (kforge etcd snapshot), or use an earlier one that verifies"}
}

// ErrRefused matches every *Error (errors.Is).
var ErrRefused = errors.New("snapshot refused")

func (e *Error) Is(target error) bool { return target == ErrRefused }
