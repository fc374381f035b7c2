package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kforge/kforge/lab"
)

// TestLabDownOfMissingLabSaysSo: lab down of a lab that does not exist changes nothing and says
// so on the one progress path: a line on stderr, or a JSON event on stdout.
func TestLabDownOfMissingLabSaysSo(t *testing.T) {
	const name = "kforge-no-such" // a valid lab name no test creates
	code, out, errs := kforge(t, "lab", "down", "--name", name)
	if code != 0 || out != "" || errs != "    lab "+name+": not found (nothing to do)\n" {
		t.Errorf("text: code %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = kforge(t, "--output", "json", "lab", "down", "--name", name)
	var ev map[string]any
	if code != 0 || errs != "" || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &ev) != nil ||
		ev["event"] != "progress" || ev["task"] != "down" || !strings.Contains(ev["message"].(string), "not found") {
		t.Errorf("json: code %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestLabStopStartUsage: lab stop and lab start need a host, and an unknown lab or host is a
// usage error (exit 2, nothing changed) that names it and says what there is.
func TestLabStopStartUsage(t *testing.T) {
	for _, cmd := range []string{"stop", "start"} {
		code, out, errs := kforge(t, "lab", cmd)
		if code != exitInvalid || out != "" || !strings.Contains(errs, `expected "<host>"`) {
			t.Errorf("lab %s without a host: code %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
		const name = "kforge-no-such" // a valid lab name no test creates
		code, out, errs = kforge(t, "lab", cmd, "--name", name, name+"-1")
		if code != exitInvalid || out != "" || !strings.HasPrefix(errs, "kforge: error: lab "+name+" not found: ") ||
			!strings.Contains(errs, "no lab on this machine") && !strings.Contains(errs, "the labs on this machine are ") {
			t.Errorf("lab %s of a missing lab: code %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
		code, out, errs = kforge(t, "lab", cmd, "--name", "Not_A_Name", "h")
		if code != exitInvalid || out != "" || !strings.Contains(errs, `lab name "Not_A_Name"`) {
			t.Errorf("lab %s with an invalid lab name: code %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
	}
	for _, cmd := range []string{"stop", "start"} {
		code, out, _ := kforge(t, "lab", cmd, "--help")
		if code != 0 || !strings.HasPrefix(out, "Usage: kforge lab "+cmd+" <host> [flags]") || !strings.Contains(out, "--name=") {
			t.Errorf("lab %s --help: code %d\n%s", cmd, code, out)
		}
	}
}

// TestLabHasHost: a host of the lab, the load balancer included, is found; another is an error
// naming the lab and the host and listing the lab's hosts.
func TestLabHasHost(t *testing.T) {
	l := &lab.Lab{Name: "demo", Hosts: []lab.Host{{Name: "demo-1"}, {Name: "demo-2"}}, LoadBalancer: &lab.Host{Name: "demo-lb"}}
	for _, h := range []string{"demo-1", "demo-2", "demo-lb"} {
		if err := labHasHost(l, h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	err := labHasHost(l, "demo-3")
	if exitCode(err) != exitInvalid || fmt.Sprint(err) != `lab demo has no host "demo-3": its hosts are demo-1, demo-2, demo-lb` {
		t.Errorf("demo-3: %v (exit %d)", err, exitCode(err))
	}
	if len(l.Hosts) != 2 {
		t.Errorf("labHasHost changed the lab's hosts: %+v", l.Hosts)
	}
}
