package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kforge/kforge/cis"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/remote"
)

// secureByDefault: the cluster kforge made with no security settings in its inventory is
// hardened.
//   - The CIS Kubernetes Benchmark's automated checks (kforge cis) on the master and a worker:
//     each check's result is printed, and none fails but those docs/security.md lists as failed
//     on purpose (allowedCISFailures).
//   - A privileged pod is refused in the default namespace (Pod Security, baseline), with the
//     reason.
//   - The audit log on the master records a Secret's creation at Metadata level, without its
//     value.
//   - etcd runs as its own user.
//   - The worker's kubelet serves a certificate of the cluster CA for its address, which the
//     workstation verifies, and kubectl logs goes through the API server, which verifies it too.
func (c *cluster) secureByDefault(ctx context.Context, master, worker lab.Host) {
	t := c.t.(*testing.T)
	t.Helper()

	// Its JSON document is the line that is a list; a failed scored check makes it exit 1.
	out, err := c.run("--output", "json", "cis")
	var results []cis.Result
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "[") {
			if jerr := json.Unmarshal([]byte(l), &results); jerr != nil {
				t.Fatalf("kforge cis: %v; its list does not parse (%v):\n%s", err, jerr, out)
			}
		}
	}
	if results == nil {
		t.Fatalf("kforge cis: %v; no results:\n%s", err, out)
	}
	if err != nil {
		t.Errorf("kforge cis exited with %v: a scored check failed that kforge does not fail on purpose", err)
	}
	allowed := allowedCISFailures(t)
	byHost := map[string][]cis.Result{}
	for _, r := range results {
		byHost[r.Host] = append(byHost[r.Host], r)
	}
	for _, h := range []string{master.Name, worker.Name} {
		rs := byHost[h]
		var lines []string
		pass, fail, scored := 0, 0, 0
		for _, r := range rs {
			res := "PASS"
			if !r.Pass {
				res = "FAIL"
				fail++
				if r.Scored {
					scored++
				}
				if _, ok := allowed[r.ID]; !ok || r.Accepted == "" {
					t.Errorf("%s: CIS %s failed (%s): %s; not in docs/security.md's list of checks kforge fails on purpose (or not accepted by kforge cis: %q)", h, r.ID, r.Text, r.Got, r.Accepted)
				}
			} else {
				pass++
			}
			lines = append(lines, fmt.Sprintf("  %-7s %s  %s: %s", r.ID, res, r.Text, r.Got))
		}
		t.Logf("CIS Kubernetes Benchmark v1.12 on %s: %d checks, %d passed, %d failed (%d scored)\n%s", h, len(rs), pass, fail, scored, strings.Join(lines, "\n"))
		if len(rs) < 20 {
			t.Errorf("%s: only %d checks ran", h, len(rs))
		}
	}
	if byHost[master.Name] == nil || !slices.ContainsFunc(byHost[master.Name], func(r cis.Result) bool { return r.ID == "1.2.5" }) {
		t.Errorf("the master was not checked as a master: %v", byHost[master.Name])
	}
	if slices.ContainsFunc(byHost[worker.Name], func(r cis.Result) bool { return strings.HasPrefix(r.ID, "1.") }) {
		t.Errorf("the worker was checked as a master")
	}

	// Pod Security: a privileged pod in the default namespace is refused, and says why.
	k := c.client()
	priv := true
	_, err = k.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: agentImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: &priv}}}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "baseline:latest"`) || !strings.Contains(err.Error(), "privileged") {
		t.Errorf("a privileged pod in the default namespace: %v; want refused by Pod Security (baseline)", err)
	} else {
		t.Logf("a privileged pod in the default namespace is refused: %v", err)
	}

	// The audit log: a Secret's creation, at Metadata level, without its value.
	value := "audit-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "audited"}, StringData: map[string]string{"v": value}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the Secret's creation in the audit log", func() (bool, string) {
		log := c.exec(ctx, master.Name, "cat "+hostpath.AuditLog)
		for _, l := range strings.Split(log, "\n") {
			var e struct {
				Level     string
				Verb      string
				ObjectRef struct{ Resource, Name string }
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Verb == "create" && e.ObjectRef.Resource == "secrets" && e.ObjectRef.Name == "audited" {
				if e.Level != "Metadata" || strings.Contains(log, value) {
					t.Errorf("the audit log records the Secret at level %s; its value in the log: %v", e.Level, strings.Contains(log, value))
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d lines, none for the Secret", strings.Count(log, "\n"))
	})

	// The encryption key is in no log or run record of the state dir (only in pki/), nor in
	// kforge cis's output.
	keys, err := pki.LoadEncryptionKeys(filepath.Join(c.state, "pki"))
	if err != nil || keys == nil {
		t.Fatalf("the state dir's encryption keys: %v", err)
	}
	secret := keys.Keys[0].Base64()
	filepath.WalkDir(c.state, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, filepath.Join(c.state, "pki")+string(filepath.Separator)) {
			return nil
		}
		if data, _ := os.ReadFile(p); strings.Contains(string(data), secret) {
			t.Errorf("%s holds the encryption key", p)
		}
		return nil
	})
	if strings.Contains(out, secret) {
		t.Error("kforge cis printed the encryption key")
	}

	// etcd runs as its own user.
	if u := strings.TrimSpace(c.exec(ctx, master.Name, "ps -o user= -C etcd")); u != "etcd" {
		t.Errorf("etcd runs as %q, want etcd", u)
	}

	// The worker's kubelet: a serving certificate of the cluster CA, for its address.
	ca, err := os.ReadFile(filepath.Join(c.state, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(worker.Address, "10250"), &tls.Config{RootCAs: pool, ServerName: worker.Address})
	if err != nil {
		t.Errorf("%s's kubelet: its serving certificate does not verify against the cluster CA for %s: %v", worker.Name, worker.Address, err)
	} else {
		cert := conn.ConnectionState().PeerCertificates[0]
		t.Logf("%s's kubelet serves %s, issued by %s, valid until %s", worker.Name, cert.Subject, cert.Issuer, cert.NotAfter.Format(time.RFC3339))
		conn.Close()
	}
}

// allowedCISFailures are the checks docs/security.md lists as failed on purpose: the rows of its
// table headed "| Check | Why kforge fails it |", by check id.
func allowedCISFailures(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "| Check | Why kforge fails it |"):
			in = true
			continue
		case !strings.HasPrefix(l, "|"):
			in = false
		}
		if !in || !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) < 2 || strings.TrimSpace(cells[1]) == "" {
			t.Errorf("docs/security.md: %q has no reason", l)
			continue
		}
		out[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	if len(out) == 0 {
		t.Fatal("docs/security.md has no table of checks kforge fails on purpose")
	}
	ids := make([]string, 0, len(out))
	for id := range out {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	t.Logf("checks failed on purpose (docs/security.md): %s", strings.Join(ids, ", "))
	return out
}

// rotateKeyUnderLoad rotates the key that encrypts Secrets (kforge secrets rotate-key) on the
// masters hosts while startLoad's prober counts failed requests to a Service and the API is
// probed through the load balancer. The first run is killed once an API server has loaded the
// new key; plan then shows the rotation in progress, and the next run finishes it. Afterwards
// every Secret written before reads back as it was, and no file on any master holds the old key.
func (c *cluster) rotateKeyUnderLoad(ctx context.Context, masters []lab.Host) {
	t := c.t
	t.Helper()
	k := c.client()
	_, failed0 := proberCounts(ctx, t, k)
	values := map[string]string{}
	for i := range 20 {
		name := fmt.Sprintf("rotate-%02d", i)
		values[name] = name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if _, err := k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"v": values[name]}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := pki.LoadEncryptionKeys(filepath.Join(c.state, "pki"))
	if err != nil || before == nil || len(before.Keys) != 1 {
		t.Fatalf("the state dir's encryption keys before the rotation: %v %v", before, err)
	}
	old := before.Keys[0]

	api := probeAPIWith(ctx, c.adminClient)
	start := time.Now()
	killed, out := c.runUntil(ctx, "the API server loaded it", "secrets", "rotate-key")
	if !killed {
		c.fatalWithMasters(ctx, masters, "the first rotate-key run ended before an API server loaded the new key:\n%s", out)
	}
	newKey := regexp.MustCompile(`new key (\S+) \(replacing`).FindStringSubmatch(out)
	if newKey == nil {
		t.Fatalf("the first rotate-key run did not name its new key:\n%s", out)
	}
	if plan, _ := c.plan(); !strings.Contains(plan, "key rotation in phase add") {
		t.Errorf("plan during the interrupted key rotation does not show it:\n%s", plan)
	}
	out, err = c.run("secrets", "rotate-key")
	took := time.Since(start)
	failed, down := api.stop()
	if err != nil {
		c.fatalWithMasters(ctx, masters, "secrets rotate-key (second run): %v\n%s", err, out)
	}
	_, failedN := proberCounts(ctx, t, k)
	t.Logf("secrets rotate-key on %d masters took %s (both runs); Service prober: %d failed requests; API probes through the load balancer: %d failed (about %s), the longest outage %s%s\n%s",
		len(masters), took.Round(time.Second), failedN-failed0, failed, down.Round(100*time.Millisecond), api.longestOutage().Round(100*time.Millisecond), api.outages(), out)
	if failedN-failed0 > 0 || failed > 0 {
		t.Errorf("during the key rotation the Service failed %d requests and the API %d; want none", failedN-failed0, failed)
	}
	if !strings.Contains(out, "new key "+newKey[1]+" ") {
		t.Errorf("the second rotate-key run did not resume the first one's rotation (key %s):\n%s", newKey[1], out)
	}

	after, err := pki.LoadEncryptionKeys(filepath.Join(c.state, "pki"))
	if err != nil || after == nil || len(after.Keys) != 1 || after.Keys[0].Name == old.Name || after.Rotation != nil {
		t.Errorf("the state dir's keys after the rotation: %v %v; want one new key, no rotation", after, err)
	}
	for name, v := range values {
		s, err := k.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || string(s.Data["v"]) != v {
			t.Errorf("Secret %s after the rotation: %v (its value as written: %v)", name, err, s != nil && string(s.Data["v"]) == v)
		}
	}
	for _, m := range masters {
		if left := c.exec(ctx, m.Name, "grep -rlF -- "+remote.Quote(old.Base64())+" /etc/kubernetes /var/lib/kubelet /etc/kforge 2>/dev/null; true"); strings.TrimSpace(left) != "" {
			t.Errorf("%s: the old key is still in %s", m.Name, strings.TrimSpace(left))
		}
	}
	if plan, code := c.plan(); strings.Contains(plan, "key rotation") {
		t.Errorf("plan after the rotation (exit %d) still shows it:\n%s", code, plan)
	}
}
