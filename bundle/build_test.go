package bundle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/progress"
)

// slowGo writes a go command that says nothing for a while before each build, as go does while
// it compiles Kubernetes, then runs the real go; it records each call in calls.
func slowGo(t *testing.T, pause time.Duration) (gocmd, calls string) {
	t.Helper()
	real, err := exec.LookPath("go")
	testenv.Need(t, err) // bundle builds need the go command
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >>" + calls + "\nif [ \"$1\" = build ]; then sleep " +
		fmt.Sprintf("%.3f", pause.Seconds()) + "; fi\nexec " + real + " \"$@\"\n"
	gocmd = filepath.Join(dir, "go")
	if err := os.WriteFile(gocmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return gocmd, calls
}

// TestBuildModulesReportsEachComponent: each component is a task (started, saying whether it
// comes from the cache; done with its duration); while one builds, a heartbeat says which
// component, for how long, and what is left — from the clock alone, while go prints nothing.
// A second build takes every component from the cache without running go.
func TestBuildModulesReportsEachComponent(t *testing.T) {
	gocmd, calls := slowGo(t, 500*time.Millisecond)
	again := pauseModule("3.10.2")
	again.Name = "pause-again" // the same tiny program, built into its own cache directory
	mods := []goModule{pauseModule("3.10.2"), again}
	var ev progress.Recorder
	o := BuildOptions{CacheDir: t.TempDir(), Go: gocmd, Heartbeat: 50 * time.Millisecond, Report: ev.Report}

	dirs, err := o.buildModules(context.Background(), mods, "1 image")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"pause", "pause-again"} {
		if st, err := os.Stat(filepath.Join(dirs[c], "pause")); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: no pause binary in %q (%v)", c, dirs[c], err)
		}
	}
	for _, c := range []struct{ task, left string }{{"pause", "pause-again, 1 image"}, {"pause-again", "1 image"}} {
		es := ev.Of(c.task)
		if len(es) < 2 || es[0].Kind != progress.Started || es[0].Message != "3.10.2, not in the cache: building it from Go modules" {
			t.Fatalf("%s: events %+v", c.task, es)
		}
		if last := es[len(es)-1]; last.Kind != progress.Done || last.Duration < 500*time.Millisecond {
			t.Errorf("%s: last event %+v, want done after at least the silent 500ms", c.task, last)
		}
		compiling, beats := false, 0
		var lastBeat time.Duration
		for _, e := range es[1 : len(es)-1] {
			if e.Kind != progress.Info {
				t.Errorf("%s: unexpected %+v", c.task, e)
			}
			switch {
			case strings.HasPrefix(e.Message, "compiling "+c.task+" 3.10.2"):
				compiling = true
			case strings.HasPrefix(e.Message, "building "+c.task+" 3.10.2 from Go modules: "):
				if !strings.HasSuffix(e.Message, " so far; left: "+c.left) || e.Duration <= lastBeat {
					t.Errorf("%s: heartbeat %q after %s (previous %s)", c.task, e.Message, e.Duration, lastBeat)
				}
				lastBeat = e.Duration
				if compiling {
					beats++
				}
			}
		}
		if beats < 3 {
			t.Errorf("%s: %d heartbeats while go build ran (silent for 500ms at least; heartbeat 50ms), want at least 3: %+v", c.task, beats, es)
		}
	}

	// Again, from the cache: no go command, and each task says where it came from.
	before, _ := os.ReadFile(calls)
	ev = progress.Recorder{}
	dirs2, err := o.buildModules(context.Background(), mods, "1 image")
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(calls); string(after) != string(before) || dirs2["pause"] != dirs["pause"] {
		t.Errorf("cached build ran go (%q) or moved (%s, was %s)", strings.TrimPrefix(string(after), string(before)), dirs2["pause"], dirs["pause"])
	}
	for _, task := range []string{"pause", "pause-again"} {
		es := ev.Of(task)
		if len(es) < 2 || es[0].Message != "3.10.2 from the cache" || es[len(es)-1].Kind != progress.Done {
			t.Errorf("%s from the cache: %+v", task, es)
		}
	}
}

// TestBuildModulesReportsAFailure: a component whose build fails is a failed task with the go
// command's error, and nothing after it is built.
func TestBuildModulesReportsAFailure(t *testing.T) {
	dir := t.TempDir()
	gocmd := filepath.Join(dir, "go")
	if err := os.WriteFile(gocmd, []byte("#!/bin/sh\necho 'go: no network' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var ev progress.Recorder
	o := BuildOptions{CacheDir: t.TempDir(), Go: gocmd, Report: ev.Report}
	next := pauseModule("3.10.2")
	next.Name = "next"
	_, err := o.buildModules(context.Background(), []goModule{pauseModule("3.10.2"), next}, "")
	if err == nil || !strings.Contains(err.Error(), "build pause: go mod tidy") {
		t.Fatalf("err %v", err)
	}
	es := ev.Of("pause")
	if last := es[len(es)-1]; last.Kind != progress.Failed || !strings.Contains(last.Err, "exit status 3") {
		t.Errorf("last event %+v", last)
	}
	if n := ev.Of("next"); len(n) != 0 {
		t.Errorf("the component after a failure was started: %+v", n)
	}
}

// TestImageArchivesReportEachImage: each image is a task, written once and then taken from the
// cache.
func TestImageArchivesReportEachImage(t *testing.T) {
	src := t.TempDir()
	var specs []imageSpec
	for _, c := range []string{"pause", "coredns"} {
		bin := filepath.Join(src, c)
		if err := os.WriteFile(bin, []byte("#!/bin/sh\necho "+c+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, imageSpec{Component: c, Name: "registry.k8s.io/" + c + ":1", Entrypoint: []string{"/" + c},
			Files: []imageFile{{Path: "/" + c, Src: bin}}})
	}
	var ev progress.Recorder
	o := BuildOptions{CacheDir: t.TempDir(), Report: ev.Report}
	for _, want := range []string{", not in the cache: writing its archive", " from the cache"} {
		ev = progress.Recorder{}
		archives, err := o.imageArchives(context.Background(), specs)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range specs {
			es := ev.Of("image " + s.Component)
			if len(es) < 2 || es[0].Kind != progress.Started || es[0].Message != s.Name+want || es[len(es)-1].Kind != progress.Done {
				t.Errorf("image %s: events %+v, want started %q and done", s.Component, es, s.Name+want)
			}
			if archives[i].Digest == "" || archives[i].Size == 0 {
				t.Errorf("image %s: archive %+v", s.Component, archives[i])
			}
		}
	}
}
