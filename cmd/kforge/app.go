package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/release"
)

// Exit codes; documented in README.md ("Exit codes").
const (
	exitOK      = 0
	exitFailed  = 1 // the operation ran and failed
	exitInvalid = 2 // bad command line or invalid inventory: nothing was changed
	// 3 is preflight.ExitCode: preflight checks failed
	exitChanges     = 4 // plan --detailed-exitcode: apply would change something
	exitInterrupted = 130
)

// Globals are the flags every command accepts; each also reads an environment variable.
type Globals struct {
	Inventory   string `short:"i" default:"kforge.yaml" env:"KFORGE_INVENTORY" help:"Inventory file (${env}); kube://NAMESPACE/NAME reads a KforgeCluster's spec and credentials from the management cluster ($$KUBECONFIG) instead."`
	StateDir    string `env:"KFORGE_STATE_DIR" placeholder:"DIR" help:"Where generated PKI, kubeconfigs and logs are kept (${env}; default ~/.local/state/kforge/<cluster>); kube://NAMESPACE/NAME keeps them in a management cluster ($$KUBECONFIG), in the Secrets of KforgeCluster NAME."`
	Concurrency int    `default:"20" env:"KFORGE_CONCURRENCY" help:"Hosts worked on at once (${env})."`
	Output      string `enum:"text,json" default:"text" env:"KFORGE_OUTPUT" help:"Output format: text or json (${env})."`
	LogFile     string `env:"KFORGE_LOG_FILE" placeholder:"FILE" help:"Debug log file (${env}; default in the state dir)."`
	Verbose     int    `short:"v" type:"counter" env:"KFORGE_VERBOSE" help:"More detail on stderr; repeat for more (${env})."`
}

// streams are the process's output channels: stdout carries real output only (a kubeconfig,
// JSON, a plan), stderr carries status lines and errors.
type streams struct {
	Out io.Writer
	Err io.Writer
}

// run parses args, runs the command and returns the exit code. It is main without os.Exit,
// so tests drive the real command line.
func run(args []string, stdout, stderr io.Writer) int {
	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("kforge"),
		kong.Description("Create, grow, upgrade, back up, restore and reset Kubernetes clusters, and renew their certificates, from a workstation over SSH."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(int) {}), // --help: kong prints, we return below
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	if err != nil {
		fmt.Fprintf(stderr, "kforge: internal error: %v\n", err)
		return exitFailed
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		var perr *kong.ParseError
		if errors.As(err, &perr) && perr.Context != nil && perr.Context.Error == nil && isHelp(args) {
			return exitOK
		}
		fmt.Fprintf(stderr, "kforge: %v\n", err)
		return exitInvalid
	}
	if kctx.Selected() == nil || isHelp(args) {
		return exitOK
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	io := &streams{Out: stdout, Err: stderr}
	log, dl := newLogger(&cli.Globals, stderr, time.Now())
	defer dl.Close()
	kctx.BindTo(ctx, (*context.Context)(nil))
	kctx.Bind(io, &cli.Globals, log, dl)
	log.Debug("kforge", "version", version, "args", args)
	err = kctx.Run()
	if err == nil {
		return exitOK
	}
	if errors.Is(err, changesPending{}) {
		return exitChanges // the plan printed is the answer
	}
	log.Debug("command failed", "err", err)
	code := exitCode(err)
	if ctx.Err() != nil {
		err, code = fmt.Errorf("interrupted: %w", err), exitInterrupted
	}
	printError(io, &cli.Globals, err, logHint(dl))
	return code
}

func isHelp(args []string) bool {
	for _, a := range args {
		if a == "--help" || a == "-h" {
			return true
		}
		if a == "--" {
			return false
		}
	}
	return false
}

// exitCoder is implemented by errors that carry their own exit code.
type exitCoder interface{ ExitCode() int }

func exitCode(err error) int {
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	// A Kubernetes version this kforge does not install, or one the inventory's bundle does
	// not hold, is bad input found before anything changed.
	var ve *release.VersionError
	var me *bundle.MissingReleaseError
	if errors.As(err, &ve) || errors.As(err, &me) {
		return exitInvalid
	}
	return exitFailed
}

// detailer is implemented by errors that can say more than their one-line message: a list of
// findings, captured remote output, a hint.
type detailer interface{ Details() []string }

// printError is the one place an error becomes text for a person (or JSON for a machine).
// hint, when not empty, says where to read more (the debug log).
func printError(s *streams, g *Globals, err error, hint string) {
	var details []string
	var d detailer
	if errors.As(err, &d) {
		details = d.Details()
	}
	if g.Output == "json" {
		ev := map[string]any{"event": "error", "error": progress.Redact(err.Error())}
		if details != nil {
			ev["details"] = details
		}
		if hint != "" {
			ev["log"] = hint
		}
		_ = json.NewEncoder(s.Err).Encode(ev)
		return
	}
	if details == nil {
		details = []string{"kforge: error: " + err.Error()}
	}
	for _, line := range details {
		fmt.Fprintln(s.Err, progress.Redact(line))
	}
	if hint != "" {
		fmt.Fprintln(s.Err, hint)
	}
}
