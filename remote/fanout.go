package remote

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// Defaults for Limits.
const (
	DefaultConcurrency  = 20
	DefaultLargeUploads = 4
	// LargeFile is the size from which an upload counts against Limits.LargeUploads.
	LargeFile = 16 << 20
)

// Limits bound a fan-out.
type Limits struct {
	// Hosts is how many hosts are worked on at once; DefaultConcurrency when 0.
	Hosts int
	// LargeUploads is how many uploads of LargeFile bytes or more run at once across all hosts
	// (they saturate the uplink long before the host limit); DefaultLargeUploads when 0.
	LargeUploads int
	// StopOnError cancels the context of the remaining hosts at the first failure. Hosts not yet
	// started are then skipped; their errors are not reported.
	StopOnError bool

	uploads chan struct{} // shared by every fan-out with these limits; see Shared
}

// Shared returns lim with one large-upload semaphore that every fan-out using the result
// shares, so LargeUploads holds across all of them (a fleet's background and foreground
// fan-outs together), not per call.
func (lim Limits) Shared() Limits {
	if lim.LargeUploads <= 0 {
		lim.LargeUploads = DefaultLargeUploads
	}
	if lim.uploads == nil {
		lim.uploads = make(chan struct{}, lim.LargeUploads)
	}
	return lim
}

// Each runs fn for every host, at most lim.Hosts at once, and waits for all of them. Each failure
// is wrapped with its host once (WithHost); the result is nil or an Errors in the order of hosts,
// so errors.As still finds the typed errors inside.
func Each[H interface{ Name() string }](ctx context.Context, hosts []H, lim Limits, fn func(ctx context.Context, h H) error) error {
	if lim.Hosts <= 0 {
		lim.Hosts = DefaultConcurrency
	}
	if lim.LargeUploads <= 0 {
		lim.LargeUploads = DefaultLargeUploads
	}
	ctx = withLargeUploadSlots(ctx, lim)
	var g *errgroup.Group
	gctx := ctx
	if lim.StopOnError {
		g, gctx = errgroup.WithContext(ctx)
	} else {
		g = new(errgroup.Group)
	}
	g.SetLimit(lim.Hosts)
	errs := make([]error, len(hosts))
	for i, h := range hosts {
		if lim.StopOnError && gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if lim.StopOnError && gctx.Err() != nil {
				return nil // skipped after another host failed
			}
			errs[i] = WithHost(h.Name(), fn(gctx, h))
			return errs[i]
		})
	}
	_ = g.Wait()
	var out Errors
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if out == nil {
		return nil
	}
	return out
}

type largeUploadKey struct{}

// withLargeUploadSlots puts the semaphore for large uploads into ctx: the shared one of lim
// (Shared), else a new one, unless one is already there (nested fan-outs share the outer limit).
func withLargeUploadSlots(ctx context.Context, lim Limits) context.Context {
	if _, ok := ctx.Value(largeUploadKey{}).(chan struct{}); ok {
		return ctx
	}
	if lim.uploads != nil {
		return context.WithValue(ctx, largeUploadKey{}, lim.uploads)
	}
	return context.WithValue(ctx, largeUploadKey{}, make(chan struct{}, lim.LargeUploads))
}

// acquireUploadSlot waits for a large-upload slot when size is large and ctx carries a
// semaphore; the returned func releases it.
func acquireUploadSlot(ctx context.Context, size int64) (release func(), err error) {
	sem, ok := ctx.Value(largeUploadKey{}).(chan struct{})
	if !ok || size < LargeFile {
		return func() {}, nil
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
