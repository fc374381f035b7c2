package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kforge/kforge/bundle"
	"github.com/kforge/kforge/hostpath"
	"github.com/kforge/kforge/internal/testenv"
	"github.com/kforge/kforge/lab"
	"github.com/kforge/kforge/pki"
	"github.com/kforge/kforge/release"
)

// TestExpiredCertificatesRenewed lets a cluster's certificates really expire (certValidity of a
// few minutes; no clock is faked): the API refuses the admin, the kubelets' client
// certificates run out and cannot be rotated. kforge certs renew --all brings it back over SSH:
// the API answers, every node is Ready as the same node (no re-join), the workloads created
// before are still there, and kubeadm certs check-expiration on the master agrees with kforge
// certs check on every date. A user kubeconfig for a view-only group is checked on the way.
func TestExpiredCertificatesRenewed(t *testing.T) {
	testenv.Require(t, lab.Prerequisites())
	inLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, "crt", release.Default(), lab.Options{Hosts: 2})
	h := c.lab.Hosts
	master, worker := h[0].Name, h[1].Name
	c.certValidity = "3m"
	c.writeInventory(h[:1], h[1:])
	if out, err := c.run("apply"); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	k := c.client()
	nodesBefore := map[string]string{}
	var podBefore string
	c.step("before-expiry", func(t *testing.T) {
		for _, n := range c.checkNodes(ctx, 2) {
			nodesBefore[n.Name] = string(n.UID)
		}
		if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before-expiry"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		podBefore = runPause(ctx, t, k, "survivor", worker)
		c.checkUserKubeconfig(ctx, k)

		// Every certificate expires within 30 days: exit 5; none within 10 seconds yet: exit 0.
		if out, code := c.certsCheck("--warn", "30d"); code != 5 || !strings.Contains(out, "apiserver") {
			t.Errorf("certs check --warn 30d: exit %d, want 5\n%s", code, out)
		}
		if out, code := c.certsCheck("--warn", "10s"); code != 0 {
			t.Errorf("certs check --warn 10s on certificates of 3 minutes: exit %d, want 0\n%s", code, out)
		}
		if out, err := c.run("certs", "check", "--warn", "soon"); exitCode(err) != 2 || !strings.Contains(out, "--warn") {
			t.Errorf("certs check --warn soon: exit %d, want 2 with an error naming --warn\n%s", exitCode(err), out)
		}
	})

	c.step("expired", func(t *testing.T) {

		// Wait for the real expiry: the API refuses the admin, then the kubelets' certificates
		// (rotated by the kubelets while the API still answered) run out too.
		admin := c.stateCert(t, "pki/kubeconfig/admin.crt")
		t.Logf("admin certificate expires %s; waiting", admin.NotAfter.Format(time.RFC3339))
		sleepUntil(ctx, t, admin.NotAfter.Add(5*time.Second))
		if _, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
			t.Fatal("the API still answers the admin after its certificate expired")
		} else {
			t.Logf("the API refuses the expired admin: %v", err)
		}
		var last time.Time
		for _, n := range []string{master, worker} {
			kc := c.hostCert(ctx, n, "/var/lib/kubelet/pki/kubelet-client-current.pem")
			t.Logf("%s: kubelet client certificate expires %s", n, kc.NotAfter.Format(time.RFC3339))
			if kc.NotAfter.After(last) {
				last = kc.NotAfter
			}
		}
		sleepUntil(ctx, t, last.Add(5*time.Second))
		out, code := c.certsCheck("--warn", "1m")
		if code != 5 || !strings.Contains(out, "EXPIRED") {
			t.Errorf("certs check on expired certificates: exit %d, want 5 and EXPIRED rows\n%s", code, out)
		}

		// The master's registry serves its certificate of 3 minutes too: expired now.
		if _, err := c.registryCert(ctx, t, h[0].Address); err == nil || !strings.Contains(err.Error(), "expired") {
			t.Errorf("%s's registry after its certificate expired: %v, want a TLS error saying it expired", master, err)
		}
	})

	c.step("renew-refused-with-another-ca", func(t *testing.T) {

		// Another cluster's state dir (its own CA): refused, naming the host and the CA; nothing
		// changes on the hosts.
		before := map[string]string{master: c.snapshot(ctx, master), worker: c.snapshot(ctx, worker)}
		other := filepath.Join(t.TempDir(), "other-state")
		if out, err := exec.Command(c.kforge, "-i", c.inventory, "--state-dir", other, "render", "-o", filepath.Join(t.TempDir(), "rendered")).CombinedOutput(); err != nil {
			t.Fatalf("kforge render into another state dir: %v\n%s", err, out)
		}
		refused, err := exec.Command(c.kforge, "-i", c.inventory, "--state-dir", other, "certs", "renew", "--all").CombinedOutput()
		if exitCode(err) != 1 || !strings.Contains(string(refused), "is a different CA") || !strings.Contains(string(refused), "Nothing was renewed") {
			t.Errorf("certs renew with another cluster's state dir: exit %d, want 1 and an error naming the CA mismatch\n%s", exitCode(err), refused)
		}
		for h, snap := range before {
			if after := c.snapshot(ctx, h); after != snap {
				t.Errorf("%s changed although renew was refused:\n%s", h, diffLines(snap, after))
			}
		}

	})

	c.step("renew-expired", func(t *testing.T) {
		start := time.Now()
		out2, err := c.run("certs", "renew", "--all")
		took := time.Since(start)
		if err != nil {
			t.Fatalf("certs renew --all on an expired cluster: %v\n%s", err, out2)
		}
		t.Logf("certs renew --all on the expired cluster took %s:\n%s", took.Round(100*time.Millisecond), out2)
		if !strings.Contains(out2, "every master at once") || !regexp.MustCompile(`(?m)^\s+`+worker+`\s+kubelet client certificate \(expired `).MatchString(out2) {
			t.Errorf("certs renew on the expired cluster: want every master at once and %s's expired kubelet client certificate renewed", worker)
		}
		if strings.Contains(out2, "PRIVATE KEY") {
			t.Error("certs renew printed key material")
		}

		// The API answers the new admin; the same nodes are Ready; the workloads are still there.
		k = c.client()
		for _, n := range c.checkNodes(ctx, 2) {
			if nodesBefore[n.Name] != string(n.UID) {
				t.Errorf("node %s is a new object (UID %s, was %s): it re-joined", n.Name, n.UID, nodesBefore[n.Name])
			}
		}
		if _, err := k.CoreV1().ConfigMaps("default").Get(ctx, "before-expiry", metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap created before the expiry: %v", err)
		}
		if p := runPause(ctx, t, k, "survivor", worker); p != podBefore {
			t.Errorf("the Deployment's pod is %s, was %s before the expiry", p, podBefore)
		}
		// The registry was restarted on its renewed certificate, which it now serves.
		if cert, err := c.registryCert(ctx, t, h[0].Address); err != nil {
			t.Errorf("%s's registry after certs renew: %v", master, err)
		} else if want := c.stateCert(t, "pki/nodes/"+master+"/kforge-registry.crt"); !cert.Equal(want) {
			t.Errorf("%s's registry serves a certificate valid until %s, not the renewed one (until %s)", master, cert.NotAfter, want.NotAfter)
		}

		c.compareWithKubeadm(ctx, master)
		// Renew left the hosts as apply would have them.
		if plan, code := c.plan(); code != 0 {
			t.Errorf("plan after certs renew: exit %d, want no changes\n%s", code, plan)
		}

	})

	c.step("renew-healthy", func(t *testing.T) {
		// Renewed again, on the healthy cluster: kube-apiserver loads its new kubelet client
		// certificate on renew's own request, whose connection takes the cut that this reload
		// gives every connection to kubelets; kubectl logs, every second during the renewal and
		// for a minute after, never fails.
		logs := c.probeLogs(ctx, "default", "deployment/survivor") // kubectl picks its pod
		start := time.Now()
		out3, err := c.run("certs", "renew", "--all")
		took := time.Since(start)
		if err != nil {
			logs.stop()
			t.Fatalf("certs renew --all on the healthy cluster: %v\n%s", err, out3)
		}
		// A minute, and at least 60 answers in all: with another lab beside this one (lanes_test.go)
		// a kubectl run may take longer than a second.
		time.Sleep(time.Minute)
		logs.waitAnswered(ctx, 60)
		logsOK, logsFailed := logs.stop()
		t.Logf("certs renew --all on the healthy cluster took %s; kubectl logs every second during it and for 60 s after: %d answered, %d failed%s\n%s",
			took.Round(100*time.Millisecond), logsOK, len(logsFailed), strings.Join(logsFailed, ""), out3)
		if len(logsFailed) > 0 || logsOK < 60 {
			t.Errorf("kubectl logs failed %d times during or after certs renew --all (and answered %d); want none", len(logsFailed), logsOK)
		}
		if !strings.Contains(out3, "kube-apiserver reaches kubelets with its new client certificate") {
			t.Errorf("certs renew --all did not make the API server load its new kubelet client certificate:\n%s", out3)
		}
	})
}

// certsCheck runs kforge certs check and returns its table and exit code.
func (c *cluster) certsCheck(args ...string) (string, int) {
	c.t.Helper()
	out, err := c.run(append([]string{"certs", "check"}, args...)...)
	code := exitCode(err)
	if code != 0 && code != 5 {
		c.t.Fatalf("certs check %v: exit %d\n%s", args, code, out)
	}
	return out, code
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// stateCert reads a certificate of the state dir.
func (c *cluster) stateCert(t *testing.T, rel string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.state, rel))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(data)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// registryCert is the certificate the registry of the master at addr serves, verified now
// against the state dir's cluster CA; the error says why it does not verify.
func (c *cluster) registryCert(ctx context.Context, t *testing.T, addr string) (*x509.Certificate, error) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(c.stateCert(t, "pki/ca.crt"))
	d := tls.Dialer{Config: &tls.Config{RootCAs: roots}}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(hostpath.RegistryPort)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// hostCert reads the first certificate of a PEM file on a lab host.
func (c *cluster) hostCert(ctx context.Context, host, path string) *x509.Certificate {
	c.t.Helper()
	out := c.exec(ctx, host, "sed -n '/-BEGIN CERTIFICATE-/,/-END CERTIFICATE-/p' "+path)
	cert, err := pki.ParseCert([]byte(out))
	if err != nil {
		c.t.Fatalf("%s: %s: %v", host, path, err)
	}
	return cert
}

func sleepUntil(ctx context.Context, t *testing.T, when time.Time) {
	t.Helper()
	select {
	case <-time.After(time.Until(when)):
	case <-ctx.Done():
		t.Fatalf("waiting until %s: %v", when.Format(time.RFC3339), ctx.Err())
	}
}

// runPause makes sure a one-replica pause Deployment named name runs on node and returns its
// pod's UID.
func runPause(ctx context.Context, t *testing.T, k kubernetes.Interface, name, node string) string {
	t.Helper()
	one := int32(1)
	labels := map[string]string{"app": name}
	r, err := release.For(release.Default())
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
					Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:" + r.Pause, ImagePullPolicy: corev1.PullNever}}}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	var uid string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ps, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(ps.Items) != 1 || ps.Items[0].Status.Phase != corev1.PodRunning {
			return false, nil
		}
		uid = string(ps.Items[0].UID)
		return true, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s has no running pod: %v", name, err)
	}
	return uid
}

// checkUserKubeconfig issues a kubeconfig for a user of group view-only, bound to the view
// ClusterRole: it lists pods and is refused creating one; certs check lists it.
func (c *cluster) checkUserKubeconfig(ctx context.Context, k kubernetes.Interface) {
	t := c.t
	t.Helper()
	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "view-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "view-only"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.kforge, "-i", c.inventory, "--state-dir", c.state, "kubeconfig", "--user", "alice", "--group", "view-only", "--ttl", "1h")
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("kforge kubeconfig --user alice: %v\n%s", err, stderrOf(err))
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("view-only user lists pods: %v", err)
	}
	_, err = alice.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10.2"}}}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("view-only user creating a pod: %v, want forbidden", err)
	}
	if _, err := exec.Command(c.kforge, "-i", c.inventory, "--state-dir", c.state, "kubeconfig", "--user", "root", "--group", "system:masters").Output(); exitCode(err) != 2 {
		t.Errorf("kforge kubeconfig --group system:masters: %v, want exit 2", err)
	}
	out, _ := c.certsCheck("--warn", "1m")
	if !regexp.MustCompile(`(?m)^issued\s+user:alice\s`).MatchString(out) {
		t.Errorf("certs check does not list alice's kubeconfig:\n%s", out)
	}
}

// compareWithKubeadm runs real kubeadm certs check-expiration on master and compares every date
// it shows with kforge certs check's, to the minute (kubeadm's resolution).
func (c *cluster) compareWithKubeadm(ctx context.Context, master string) {
	t := c.t
	t.Helper()
	bin, err := bundle.KubernetesBinaries(context.Background(), bundle.BuildOptions{Version: c.version, Report: testenv.Report(t)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(bin, "kubeadm"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd, err := c.lab.Command(ctx, master, "sh", "-c", "cat > /tmp/kubeadm && chmod +x /tmp/kubeadm")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("copy kubeadm to %s: %v\n%s", master, err, out)
	}
	kubeadm := c.exec(ctx, master, "/tmp/kubeadm certs check-expiration 2>&1; rm -f /tmp/kubeadm")
	t.Logf("kubeadm certs check-expiration on %s:\n%s", master, kubeadm)

	out, err := c.runJSON("certs", "check", "--warn", "10s")
	if err != nil {
		t.Fatalf("kforge --output json certs check: %v\n%s", err, out)
	}
	var rep struct{ Certificates []pki.Inspection }
	if err := json.Unmarshal([]byte(lastLine(out)), &rep); err != nil {
		t.Fatalf("certs check JSON: %v\n%s", err, out)
	}
	kforge := map[string]time.Time{}
	for _, in := range rep.Certificates {
		if in.Where == master {
			kforge[in.Name] = in.NotAfter
		}
	}
	row := regexp.MustCompile(`(?m)^(\S+)\s+([A-Z][a-z]{2} \d\d, \d{4} \d\d:\d\d UTC)\s`)
	rows := row.FindAllStringSubmatch(kubeadm, -1)
	if len(rows) < 14 {
		t.Fatalf("kubeadm certs check-expiration: %d dated rows, want the 11 certificates and 3 CAs", len(rows))
	}
	for _, r := range rows {
		want, ok := kforge[r[1]]
		if !ok {
			t.Errorf("kubeadm lists %s, kforge certs check does not (on %s)", r[1], master)
			continue
		}
		if got := want.UTC().Format("Jan 02, 2006 15:04 UTC"); got != r[2] {
			t.Errorf("%s expires %s by kubeadm, %s by kforge", r[1], r[2], got)
		}
	}
}

// lastLine is the last non-empty line of s (the result object of an --output json run).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
