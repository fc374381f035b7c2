package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kforge/kforge/progress"
)

// debugLog is the full debug log: every record at every level goes to a file; records at the
// -v level also go to stderr. The file is the cluster's state dir's logs/ when the command works
// on a cluster (UseDir), --log-file when given, else ~/.local/state/kforge/logs/. Records made
// before the command knows its state dir are kept in memory and written first. Its path is
// printed when a command fails.
type debugLog struct {
	mu    sync.Mutex
	path  string
	fixed bool // path is final: --log-file, or UseDir, or the first Path/Close
	start time.Time
	buf   bytes.Buffer // records written before the path was final
	f     *os.File
	err   error
}

// defaultLogDir is where logs go when no cluster is known: ~/.local/state/kforge/logs/.
func defaultLogDir() string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "kforge", "logs")
}

func logName(t time.Time) string { return "kforge-" + t.UTC().Format("20060102-150405") + ".log" }

func (l *debugLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.fixed {
		return l.buf.Write(p)
	}
	l.openLocked()
	if l.err != nil {
		return len(p), nil // a log that cannot be written must not fail the command
	}
	return l.f.Write(p)
}

// Off turns the debug log off, for a command that runs for good and logs to stderr alone
// (kforge controller): records would otherwise wait in memory for a path.
func (l *debugLog) Off() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fixed, l.err = true, errors.New("the debug log is off")
	l.buf.Reset()
}

// UseDir puts the log into dir (a cluster's state dir's logs/), unless --log-file chose a file.
func (l *debugLog) UseDir(dir string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.fixed {
		l.path, l.fixed = filepath.Join(dir, logName(l.start)), true
	}
}

// openLocked fixes the path (the default when nothing chose one) and opens the file, writing
// what was kept in memory first.
func (l *debugLog) openLocked() {
	if !l.fixed {
		l.path, l.fixed = filepath.Join(defaultLogDir(), logName(l.start)), true
	}
	if l.f != nil || l.err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
		l.err = err
		return
	}
	l.f, l.err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if l.err == nil && l.buf.Len() > 0 {
		_, l.err = l.f.Write(l.buf.Bytes())
		l.buf.Reset()
	}
}

// Path is the log file's path, written out so a person can read it.
func (l *debugLog) Path() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.openLocked()
	if l.err != nil {
		return ""
	}
	return l.path
}

func (l *debugLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		l.openLocked()
	}
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// newLogger builds the logger bound into every command.
func newLogger(g *Globals, stderr io.Writer, now time.Time) (*slog.Logger, *debugLog) {
	dl := &debugLog{path: g.LogFile, fixed: g.LogFile != "", start: now}
	file := slog.NewJSONHandler(dl, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: redactAttr})
	level := slog.LevelWarn - slog.Level(4*g.Verbose) // -v: info, -vv: debug
	term := slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return redactAttr(groups, a)
	}})
	return slog.New(teeHandler{file, term}), dl
}

func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(progress.Redact(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(progress.Redact(err.Error()))
		}
	}
	return a
}

// teeHandler sends each record to every handler that wants it.
type teeHandler []slog.Handler

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range t {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Message = progress.Redact(r.Message)
	var errs []error
	for _, h := range t {
		if h.Enabled(ctx, r.Level) {
			errs = append(errs, h.Handle(ctx, r.Clone()))
		}
	}
	return errors.Join(errs...)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	out := make(teeHandler, len(t))
	for i, h := range t {
		out[i] = h.WithGroup(name)
	}
	return out
}

// logHint is the line printed under a failure: where the whole story is.
func logHint(dl *debugLog) string {
	if p := dl.Path(); p != "" {
		return fmt.Sprintf("debug log: %s", p)
	}
	return ""
}
