package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/remote"
)

// TestShellcheck lints every script with shellcheck -s sh, as the file is and as it runs on a
// host (Body). It runs in make test-quick: without shellcheck it fails, it does not skip.
func TestShellcheck(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, name := range Names() {
		paths = append(paths, name+".sh")
		body := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(body, []byte("#!/bin/sh\n"+Body(name)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, body)
	}
	testenv.Shellcheck(t, paths...)
}

// TestEveryScriptIsTested: each script is run by a test of this package (named in a call of
// run or Command in a _test.go file).
func TestEveryScriptIsTested(t *testing.T) {
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range tests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, data...)
	}
	for _, name := range Names() {
		if !bytes.Contains(src, []byte(`Command("`+name+`"`)) {
			t.Errorf("%s.sh is not run by any test", name)
		}
	}
}

var inputRE = regexp.MustCompile(`\$\{([a-z_]+)(:?)\?\}`)

// TestInputsFailLoudly: a script run without one of its declared inputs stops at once, naming
// it, before it does anything.
func TestInputsFailLoudly(t *testing.T) {
	for _, name := range Names() {
		for _, m := range inputRE.FindAllStringSubmatch(string(Source(name)), -1) {
			if m[2] == "" {
				continue // ${x?}: may be empty, but set
			}
			var vars []string
			for _, o := range inputRE.FindAllStringSubmatch(string(Source(name)), -1) {
				if o[1] != m[1] {
					vars = append(vars, o[1], "x")
				}
			}
			s := newSandbox(t)
			_, stderr, err := s.run(Command(name, vars...), "")
			var ee *exec.ExitError
			if !errors.As(err, &ee) || !strings.Contains(stderr, m[1]) {
				t.Errorf("%s without %s: %v, stderr %q; want a failure naming it", name, m[1], err, stderr)
			}
			if calls := s.calls(); calls != "" {
				t.Errorf("%s without %s ran %q", name, m[1], calls)
			}
		}
	}
}

// TestCommand: inputs are set in order before the script, quoted; comments stay behind.
func TestCommand(t *testing.T) {
	got := Command("stop-unit", "unit", "a.service", "unit_path", "/etc/it's here", "said", "stopped")
	want := "unit=a.service\nunit_path='/etc/it'\\''s here'\nsaid=stopped\n: \"${unit:?}\""
	if !strings.HasPrefix(got, want) {
		t.Errorf("Command =\n%s\nwant it to begin\n%s", got, want)
	}
	if strings.Contains(got, "# ") || strings.Contains(got, "\n\n") {
		t.Errorf("comments or blank lines reach the host:\n%s", got)
	}
	for _, f := range []func(){func() { Command("no-such-script") }, func() { Command("stop-unit", "unit") }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		}()
	}
}

// sandbox runs scripts under this machine's sh (Debian: dash) in a temporary directory, with
// stub commands in its bin directory first on PATH. Stubs append their name and arguments to
// the calls file.
type sandbox struct {
	t        *testing.T
	dir, bin string
	// path is PATH after bin; "" for bin only (no other command found).
	path string
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	s := &sandbox{t: t, dir: t.TempDir(), path: os.Getenv("PATH")}
	s.bin = filepath.Join(s.dir, "bin")
	if err := os.Mkdir(s.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}

// stub puts a command name on PATH that logs its call and runs body (sh) with its arguments.
func (s *sandbox) stub(name, body string) {
	s.t.Helper()
	script := "#!/bin/sh\necho \"" + name + " $*\" >>" + remote.Quote(s.file("calls")) + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(s.bin, name), []byte(script), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// file is a path in the sandbox's directory.
func (s *sandbox) file(name string) string { return filepath.Join(s.dir, name) }

// write writes a file in the sandbox's directory (making its parents) and returns its path.
func (s *sandbox) write(name, data string) string {
	s.t.Helper()
	p := s.file(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		s.t.Fatal(err)
	}
	return p
}

// calls are the stubs' calls so far, one a line.
func (s *sandbox) calls() string {
	data, _ := os.ReadFile(s.file("calls"))
	return string(data)
}

// run runs command with sh -c in the sandbox's directory, stdin as its input.
func (s *sandbox) run(command, stdin string) (stdout, stderr string, err error) {
	s.t.Helper()
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = s.dir
	path := s.bin
	if s.path != "" {
		path += ":" + s.path
	}
	cmd.Env = append(os.Environ(), "PATH="+path, "LC_ALL=C")
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// mustRun is run that fails the test when the script fails.
func (s *sandbox) mustRun(command, stdin string) string {
	s.t.Helper()
	out, stderr, err := s.run(command, stdin)
	if err != nil {
		s.t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	return out
}
