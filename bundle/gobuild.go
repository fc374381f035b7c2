package bundle

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kforge/kforge/internal/fsx"
	"github.com/kforge/kforge/progress"
)

// DefaultCacheDir is where built artifacts are cached when neither BuildOptions.CacheDir nor
// $KFORGE_CACHE_DIR says otherwise.
const DefaultCacheDir = "/var/cache/kforge"

// BuildOptions say where and how artifacts are built from Go modules.
type BuildOptions struct {
	// Version is the Kubernetes version, e.g. "v1.36.3".
	Version string
	// CacheDir holds the scratch build modules and the built artifacts, one directory per
	// component and version. Empty means $KFORGE_CACHE_DIR, else DefaultCacheDir.
	CacheDir string
	// Go is the go command to run; empty means "go" from PATH.
	Go string
	// Env is added to the go command's environment (e.g. GOCACHE=... to build from a cold
	// cache without touching the shared one).
	Env []string
	// Report receives the build's progress: for Build a task per component and per image
	// (started, saying whether it comes from the cache; then done with its duration, or
	// failed), what a component's build is doing (resolving modules, compiling), and while one
	// builds a heartbeat saying for how long and what is left. nil discards it.
	Report progress.Reporter
	// Heartbeat is how often a component or image that is being built says so; default 8 s, so that a line comes at least every 10 s even on a loaded machine (measured: 10.5 s between lines at 10 s and a load of 11).
	Heartbeat time.Duration
	// GoOutput receives the go command's own output (downloads, compiler errors); nil discards
	// it. A failing go command's output is in its *GoCommandError either way.
	GoOutput io.Writer
}

// CacheRoot is where o caches builds: o.CacheDir, else $KFORGE_CACHE_DIR, else DefaultCacheDir.
func (o BuildOptions) CacheRoot() string { return o.cacheDir() }

func (o BuildOptions) cacheDir() string {
	if o.CacheDir != "" {
		return o.CacheDir
	}
	if d := os.Getenv("KFORGE_CACHE_DIR"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// reporter is o.Report, or progress.Discard.
func (o BuildOptions) reporter() progress.Reporter {
	if o.Report == nil {
		return progress.Discard
	}
	return o.Report
}

// info reports a line of progress.
func (o BuildOptions) info(format string, args ...any) {
	o.reporter()(progress.Event{Kind: progress.Info, Message: fmt.Sprintf(format, args...)})
}

// heartbeat is how often a build in progress says so.
func (o BuildOptions) heartbeat() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return 8 * time.Second
}

// goModule is the recipe for building some main packages from Go modules: a scratch module
// requiring Require (with Replace directives), importing Packages from a tools.go, built with
// Ldflags. Prepare may add or patch files in the scratch module before `go mod tidy`.
type goModule struct {
	Name     string // cache directory name, e.g. "kubernetes"
	Version  string
	Require  map[string]string // module path -> version
	Replace  map[string]string // module path -> "path version"
	Packages []string          // main packages; binaries are named after their last element unless Output says otherwise
	Output   map[string]string // package -> binary name, where it differs from the last path element
	// Tests are test packages compiled into binaries (go test -c), by package: binary name.
	Tests   map[string]string
	Ldflags string
	// Tags are the build tags; Cgo builds with cgo (statically linked: the binary runs on any
	// host), for the few components that need C (runc: libseccomp, nsenter).
	Tags []string
	Cgo  bool
	// Local is a main package written into the scratch module itself (files by name),
	// built as binary LocalName. Used for pause and patched mains (flannel).
	Local     map[string][]byte
	LocalName string
	// Kforge are packages of kforge's own module that Local imports (bundle/daemon), as files by
	// their path in the module: written into the scratch module as a module of their own,
	// github.com/kforge/kforge, which it requires and replaces with that directory.
	Kforge map[string][]byte
	// Prepare runs in the scratch module directory after go.mod is written and Require is
	// downloaded, before `go mod tidy` (flannel copies and patches its main.go here).
	Prepare func(ctx context.Context, r *goRunner, dir string) error
	// Stamp returns extra -ldflags computed from the resolved scratch module (e.g. a build
	// date); it is not part of the recipe, so it must be a function of the recipe.
	Stamp func(ctx context.Context, r *goRunner, dir string) (string, error)
}

// recipe is what decides whether a cached build is still valid: when it changes, the
// artifacts are rebuilt.
func (m goModule) recipe() string {
	b, _ := json.Marshal(struct {
		R         int
		Require   map[string]string
		Replace   map[string]string
		Packages  []string
		Output    map[string]string
		Ldflags   string
		Local     map[string][]byte
		LocalName string
		Tags      []string          `json:",omitempty"` // omitted when unset: older recipes stay valid
		Cgo       bool              `json:",omitempty"`
		Tests     map[string]string `json:",omitempty"`
		Kforge    map[string][]byte `json:",omitempty"`
	}{recipeRevision, m.Require, m.Replace, m.Packages, m.Output, m.Ldflags, m.Local, m.LocalName, m.Tags, m.Cgo, m.Tests, m.Kforge})
	return string(b)
}

// recipeRevision is bumped whenever the way binaries are built changes in a way the recipe
// fields do not show.
const recipeRevision = 1

// binaries returns the directory holding m's binaries, building them first unless a complete
// build with the same recipe is cached. Each recipe has its own directory,
// <cache>/bin/<name>/<version>-<recipe hash>, so a returned directory never changes under its
// user. Builds land atomically: into a temporary directory that is renamed into place, under an
// exclusive lock so that concurrent callers build once.
func binaries(ctx context.Context, o BuildOptions, m goModule) (string, error) {
	root := filepath.Join(o.cacheDir(), "bin", m.Name)
	want := m.recipe()
	final, ok := cachedBinaries(o, m)
	if ok {
		touch(filepath.Join(final, recipeFile))
		return final, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("build cache %s: %w (set KFORGE_CACHE_DIR to a writable directory)", root, err)
	}
	unlock, err := fsx.Lock(ctx, filepath.Join(root, m.Version+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if cachedRecipe(final) == want { // built by someone else while we waited
		touch(filepath.Join(final, recipeFile))
		return final, nil
	}

	src := filepath.Join(o.cacheDir(), "src", m.Name+"-"+m.Version)
	r := &goRunner{opts: o}
	if err := r.prepareModule(ctx, src, m); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, "."+m.Version+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	o.info("compiling %s %s (go build)", m.Name, m.Version)
	if err := r.build(ctx, src, tmp, m); err != nil {
		return "", err
	}
	// Cached binaries are read-only: nothing should change them in place.
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if err := os.Chmod(filepath.Join(tmp, e.Name()), 0o555); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, recipeFile), []byte(want), 0o444); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	// A directory of this recipe without a complete build (a crash between rename and recipe
	// cannot happen, but a person may have edited it) is replaced.
	if err := os.RemoveAll(final); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	o.info("built %s %s into %s", m.Name, m.Version, final)
	pruneBinaries(root, final)
	return final, nil
}

// cachedBinaries returns the cache directory of m's binaries and whether a complete build of
// m's recipe is there.
func cachedBinaries(o BuildOptions, m goModule) (dir string, ok bool) {
	want := m.recipe()
	sum := sha256.Sum256([]byte(want))
	dir = filepath.Join(o.cacheDir(), "bin", m.Name, m.Version+"-"+hex.EncodeToString(sum[:])[:12])
	return dir, cachedRecipe(dir) == want
}

const recipeFile = ".recipe"

func cachedRecipe(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, recipeFile))
	if err != nil {
		return ""
	}
	return string(b)
}

// goRunner runs the go command for a build.
type goRunner struct{ opts BuildOptions }

// GoCommandError is a failed go command: what ran, where, and its output.
type GoCommandError struct {
	Dir    string
	Args   []string
	Err    error
	Output string
}

func (e *GoCommandError) Error() string {
	return fmt.Sprintf("go %s (in %s): %v", strings.Join(e.Args, " "), e.Dir, e.Err)
}

func (e *GoCommandError) Unwrap() error { return e.Err }

// Details returns the last lines of the go command's output, for the error printer.
func (e *GoCommandError) Details() []string {
	lines := strings.Split(strings.TrimRight(e.Output, "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return append([]string{"kforge: error: " + e.Error()}, lines...)
}

func (r *goRunner) run(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	gobin := r.opts.Go
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0",
		"GOFLAGS=-trimpath -buildvcs=false -mod=mod",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	)
	cmd.Env = append(cmd.Env, r.opts.Env...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if r.opts.GoOutput != nil {
		cmd.Stderr = io.MultiWriter(&stderr, r.opts.GoOutput)
	}
	if err := cmd.Run(); err != nil {
		return nil, &GoCommandError{Dir: dir, Args: args, Err: err, Output: stderr.String()}
	}
	return stdout.Bytes(), nil
}

// ModuleSource returns the directory of module at version in the Go module cache, downloading
// it first when it is not there (the conformance kit takes test images' data files from it).
func ModuleSource(ctx context.Context, o BuildOptions, module, version string) (string, error) {
	dir := o.cacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	info, err := (&goRunner{opts: o}).download(ctx, dir, module+"@"+version)
	return info.Dir, err
}

// modInfo is what `go mod download -json` reports about one module.
type modInfo struct {
	Path, Version, GoMod, Dir, Time string
	Error                           string
}

func (r *goRunner) download(ctx context.Context, dir, mod string) (modInfo, error) {
	out, err := r.run(ctx, dir, nil, "mod", "download", "-json", mod)
	var info modInfo
	if jerr := json.Unmarshal(out, &info); jerr != nil && err == nil {
		err = fmt.Errorf("go mod download %s: %w", mod, jerr)
	}
	if err != nil {
		return info, err
	}
	if info.Error != "" {
		return info, fmt.Errorf("go mod download %s: %s", mod, info.Error)
	}
	return info, nil
}

// kforgeModule is kforge's own module path, as goModule.Kforge's packages are imported.
const kforgeModule = "github.com/kforge/kforge"

// prepareModule writes the scratch module (go.mod, tools.go, local files) into dir and
// resolves its dependencies. A scratch module already resolved for the same recipe is reused.
func (r *goRunner) prepareModule(ctx context.Context, dir string, m goModule) error {
	want := m.recipe()
	if b, err := os.ReadFile(filepath.Join(dir, recipeFile)); err == nil && string(b) == want {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module kforge.local/build/%s\n\ngo 1.26.0\n\nrequire (\n", m.Name)
	for _, p := range sortedKeys(m.Require) {
		fmt.Fprintf(&gomod, "\t%s %s\n", p, m.Require[p])
	}
	if len(m.Kforge) > 0 {
		fmt.Fprintf(&gomod, "\t%s v0.0.0\n", kforgeModule)
	}
	gomod.WriteString(")\n")
	if len(m.Replace)+len(m.Kforge) > 0 {
		gomod.WriteString("\nreplace (\n")
		for _, p := range sortedKeys(m.Replace) {
			fmt.Fprintf(&gomod, "\t%s => %s\n", p, m.Replace[p])
		}
		if len(m.Kforge) > 0 {
			fmt.Fprintf(&gomod, "\t%s => ./kforge\n", kforgeModule)
		}
		gomod.WriteString(")\n")
	}
	if len(m.Kforge) > 0 {
		files := map[string][]byte{"go.mod": []byte("module " + kforgeModule + "\n\ngo 1.26.0\n")}
		maps.Copy(files, m.Kforge)
		for name, data := range files {
			if err := fsx.WriteFile(filepath.Join(dir, "kforge", filepath.FromSlash(name)), data, 0o644); err != nil {
				return err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod.String()), 0o644); err != nil {
		return err
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\n// Package tools pins the main packages this scratch module builds.\npackage tools\n\nimport (\n")
	for _, p := range m.Packages {
		fmt.Fprintf(&tools, "\t_ %q\n", p)
	}
	for _, p := range sortedKeys(m.Tests) {
		fmt.Fprintf(&tools, "\t_ %q\n", p)
	}
	tools.WriteString(")\n")
	if len(m.Packages)+len(m.Tests) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "tools.go"), []byte(tools.String()), 0o644); err != nil {
			return err
		}
	}
	for name, data := range m.Local {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	r.opts.info("resolving the modules of %s %s (go mod download, go mod tidy)", m.Name, m.Version)
	if m.Prepare != nil {
		if err := m.Prepare(ctx, r, dir); err != nil {
			return err
		}
	}
	if _, err := r.run(ctx, dir, nil, "mod", "tidy"); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, recipeFile), []byte(want), 0o644)
}

// build compiles m's packages from the scratch module src into out.
func (r *goRunner) build(ctx context.Context, src, out string, m goModule) error {
	ld := "-s -w " + m.Ldflags
	if m.Stamp != nil {
		extra, err := m.Stamp(ctx, r, src)
		if err != nil {
			return err
		}
		ld += " " + extra
	}
	var env []string
	if m.Cgo {
		env = append(env, "CGO_ENABLED=1")
		ld += " -extldflags -static"
	}
	flags := []string{"-ldflags", ld}
	if len(m.Tags) > 0 {
		flags = append(flags, "-tags", strings.Join(m.Tags, ","))
	}
	// Packages whose binary name is their last path element build in one go command, which
	// shares work between them; renamed ones build one by one.
	var same []string
	for _, p := range m.Packages {
		if _, ok := m.Output[p]; !ok {
			same = append(same, p)
		}
	}
	if len(same) > 0 {
		args := append(append([]string{"build"}, flags...), append([]string{"-o", out + "/"}, same...)...)
		if _, err := r.run(ctx, src, env, args...); err != nil {
			return err
		}
	}
	for _, p := range m.Packages {
		if name, ok := m.Output[p]; ok {
			if _, err := r.run(ctx, src, env, append(append([]string{"build"}, flags...), "-o", filepath.Join(out, name), p)...); err != nil {
				return err
			}
		}
	}
	for _, p := range sortedKeys(m.Tests) {
		if _, err := r.run(ctx, src, env, append(append([]string{"test", "-c"}, flags...), "-o", filepath.Join(out, m.Tests[p]), p)...); err != nil {
			return err
		}
	}
	if m.LocalName != "" {
		if _, err := r.run(ctx, src, env, append(append([]string{"build"}, flags...), "-o", filepath.Join(out, m.LocalName), ".")...); err != nil {
			return err
		}
	}
	return nil
}

// stagingReplaces reads a go.mod and returns, for every "X => ./staging/..." replace, a replace
// of X by its published version (v0.MINOR.PATCH for Kubernetes 1.MINOR.PATCH).
func stagingReplaces(gomod []byte, stagingVersion string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "replace" {
			f = f[1:]
		}
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			out[f[0]] = f[0] + " " + stagingVersion
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
