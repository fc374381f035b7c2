package progress

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// LogHandler lets a package that reports through a *slog.Logger (the lab) take the one progress
// path: records at Info and above become Info events for r (whose printer also writes them to the
// debug log), the rest go to next. A "task" attribute names the event's task and heads its
// message; the other attributes follow the message as "(key value, ...)".
func LogHandler(r Reporter, next slog.Handler) slog.Handler { return logHandler{r: r, next: next} }

type logHandler struct {
	r     Reporter
	next  slog.Handler
	attrs []slog.Attr
}

func (h logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h logHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelInfo {
		return h.next.Handle(ctx, rec)
	}
	var b strings.Builder
	task := ""
	add := func(a slog.Attr) bool {
		if a.Key == "task" {
			task = a.Value.String()
			return true
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	rec.Attrs(add)
	msg := rec.Message
	if task != "" {
		msg = task + ": " + msg // a line of its own, not under a step's heading
	}
	if b.Len() > 0 {
		msg += " (" + b.String() + ")"
	}
	h.r(Event{Time: rec.Time, Kind: Info, Task: task, Message: msg})
	return nil
}

func (h logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return logHandler{r: h.r, next: h.next.WithAttrs(as), attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{r: h.r, next: h.next.WithGroup(name), attrs: h.attrs}
}
