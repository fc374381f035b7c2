package fsx

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWriteFileReplacesAtomicallyWithMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "f")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "two" || fi.Mode().Perm() != 0o644 {
		t.Fatalf("content %q mode %v err %v", b, fi.Mode(), err)
	}
	if es, _ := os.ReadDir(filepath.Dir(p)); len(es) != 1 {
		t.Errorf("temporary files left: %v", es)
	}
}

func TestLockExcludesAndWaits(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".lock")
	unlock, err := TryLock(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(p); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Lock(ctx, p); err == nil {
		t.Fatal("Lock got a held lock")
	}
	go func() { time.Sleep(50 * time.Millisecond); unlock() }()
	u2, err := Lock(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	u2()
}
