package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// debugLog is the full debug log: every record at every level goes to a file, opened on the
// first record (so `kforge version` leaves no file behind); records at the -v level also go to
// stderr. Its path is printed when a command fails.
type debugLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	err  error
}

// defaultLogPath is where the log goes without --log-file: the state dir's logs/ when a
// cluster is known, else ~/.local/state/kforge/logs/.
func defaultLogPath(now time.Time) string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "kforge", "logs", "kforge-"+now.UTC().Format("20060102-150405")+".log")
}

func (l *debugLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && l.err == nil {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o700); err != nil {
			l.err = err
		} else {
			l.f, l.err = os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		}
	}
	if l.err != nil {
		return len(p), nil // a log that cannot be written must not fail the command
	}
	return l.f.Write(p)
}

// Path returns the log file's path once something was written to it.
func (l *debugLog) Path() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ""
	}
	return l.path
}

func (l *debugLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// newLogger builds the logger bound into every command.
func newLogger(g *Globals, stderr io.Writer, now time.Time) (*slog.Logger, *debugLog) {
	dl := &debugLog{path: g.LogFile}
	if dl.path == "" {
		dl.path = defaultLogPath(now)
	}
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

// Safety net behind the packages' own care: anything that looks like a bootstrap token or a
// PEM private key is redacted before it reaches a log.
var (
	tokenRE = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
	pemRE   = regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----`)
)

func redactString(s string) string {
	s = tokenRE.ReplaceAllString(s, "[redacted-token]")
	return pemRE.ReplaceAllString(s, "[redacted-private-key]")
}

func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(redactString(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(redactString(err.Error()))
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
	r.Message = redactString(r.Message)
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
