package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The selection Kubernetes' conformance program asks for, without the specs that disrupt the
// cluster or take long (they run one at a time).
const (
	Focus = `\[Conformance\]`
	Skip  = `\[Serial\]|\[Disruptive\]|\[Slow\]`
)

// The NetworkPolicy specs of sig-network (Netpol, labelled Feature:NetworkPolicy), without the
// same kinds as above, nor the three over SCTP (also labelled Feature:SCTPConnectivity): the
// lab's kernel has no SCTP (CONFIG_IP_SCTP), so no pod could open an SCTP socket.
const (
	NetworkPolicyFocus = `\[Feature:NetworkPolicy\]`
	NetworkPolicySkip  = Skip + `|\[Feature:SCTPConnectivity\]`
)

// The dual-stack specs (labelled Feature:IPv6DualStack), for a dual-stack cluster, without the
// same kinds as above and those over SCTP, for the same reasons.
const (
	DualStackFocus = `\[Feature:IPv6DualStack\]`
	DualStackSkip  = NetworkPolicySkip
)

// RunOptions say what to run against which cluster.
type RunOptions struct {
	Kubeconfig string
	// ReportDir receives junit.xml (ginkgo's JUnit report), e2e.log (the suite's output) and
	// summary.txt (Summary.String).
	ReportDir string
	// Focus and Skip select specs by name (regular expressions); Focus and Skip above when empty.
	Focus, Skip string
	// Procs is how many ginkgo processes run specs at once; default 4 (the specs mostly wait
	// on the cluster).
	Procs int
	// Timeout bounds the whole suite; default 2 h.
	Timeout time.Duration
	// Nodes is the number of schedulable nodes (e2e.test --num-nodes).
	Nodes int
	// Output receives the suite's progress as it runs (nil: only the file in ReportDir).
	Output io.Writer
}

// Run runs k's suite with o and returns its summary. A run whose specs failed returns the
// summary and no error; an error means the suite could not run or report.
func Run(ctx context.Context, k Kit, o RunOptions) (Summary, error) {
	if o.Focus == "" {
		o.Focus = Focus
	}
	if o.Skip == "" {
		o.Skip = Skip
	}
	if o.Procs == 0 {
		o.Procs = 4
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Hour
	}
	if err := os.MkdirAll(o.ReportDir, 0o755); err != nil {
		return Summary{}, err
	}
	// A report of an earlier run must not pass for this one's.
	for _, f := range []string{"junit.xml", "summary.txt"} {
		if err := os.Remove(filepath.Join(o.ReportDir, f)); err != nil && !os.IsNotExist(err) {
			return Summary{}, err
		}
	}
	log, err := os.Create(filepath.Join(o.ReportDir, "e2e.log"))
	if err != nil {
		return Summary{}, err
	}
	defer log.Close()
	var out io.Writer = log
	if o.Output != nil {
		out = io.MultiWriter(log, o.Output)
	}
	args := []string{
		"--procs=" + strconv.Itoa(o.Procs), "--timeout=" + o.Timeout.String(), "--no-color",
		"--focus=" + o.Focus, "--skip=" + o.Skip,
		"--junit-report=junit.xml", "--output-dir=" + o.ReportDir,
		k.E2ETest, "--",
		"--kubeconfig=" + o.Kubeconfig, "--provider=skeleton", "--kubectl-path=" + k.Kubectl,
		"--num-nodes=" + strconv.Itoa(o.Nodes), "--disable-log-dump",
	}
	cmd := exec.CommandContext(ctx, k.Ginkgo, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "KUBECONFIG="+o.Kubeconfig)
	start := time.Now()
	runErr := cmd.Run()
	s, err := ReadJUnit(filepath.Join(o.ReportDir, "junit.xml"), o.Focus, o.Skip)
	if err != nil {
		return Summary{}, fmt.Errorf("ginkgo %s: %v; its report: %w (output in %s)", k.E2ETest, runErr, err, log.Name())
	}
	s.Took = time.Since(start)
	if err := os.WriteFile(filepath.Join(o.ReportDir, "summary.txt"), []byte(s.String()), 0o644); err != nil {
		return s, err
	}
	if runErr != nil && s.Failed == 0 {
		return s, fmt.Errorf("ginkgo %s: %w, with no failed spec in its report (output in %s)", k.E2ETest, runErr, log.Name())
	}
	return s, nil
}
