package fleet

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kforge/kforge/facts"
	"github.com/kforge/kforge/inventory"
	"github.com/kforge/kforge/progress"
	"github.com/kforge/kforge/remote"
	"github.com/kforge/kforge/remote/remotetest"
)

func nodes() []inventory.Node {
	return []inventory.Node{
		{Host: inventory.Host{Name: "m1", Address: "10.0.0.1"}, Role: inventory.RoleMaster},
		{Host: inventory.Host{Name: "w1", Address: "10.0.0.2"}, Role: inventory.RoleWorker},
		{Host: inventory.Host{Name: "w2", Address: "10.0.0.3"}, Role: inventory.RoleWorker},
	}
}

// closer is an in-memory host that notes when its connection is closed.
type closer struct {
	*remotetest.Host
	closed *atomic.Int32
}

func (c closer) Close() error { c.closed.Add(1); return nil }

// TestConnectGathersFactsOnceEachAndCloseEndsEveryConnection: Connect opens every host through
// the Connect option, gathers its facts in one command and reports a line per host; Each and
// Close reach every host.
func TestConnectGathersFactsOnceEachAndCloseEndsEveryConnection(t *testing.T) {
	canned, err := os.ReadFile("../facts/testdata/debian12-hybrid.txt")
	if err != nil {
		t.Fatal(err)
	}
	var closed atomic.Int32
	hosts := map[string]*remotetest.Host{}
	f := New(nodes(), Options{Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) {
		h := remotetest.New(n.Name)
		h.On(facts.Command(facts.Options{}), remotetest.Result{Stdout: string(canned)})
		hosts[n.Name] = h
		return closer{h, &closed}, nil
	}, Limits: remote.Limits{Hosts: 1}})
	var lines []string
	if err := f.Connect(context.Background(), func(e progress.Event) {
		if e.Kind == progress.HostDone {
			lines = append(lines, e.Host)
		}
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	if !slices.Equal(lines, []string{"m1", "w1", "w2"}) {
		t.Errorf("host lines %v", lines)
	}
	for name, h := range hosts {
		if len(h.Commands()) != 1 || f.Facts(name) == nil || f.Facts(name).Host != name {
			t.Errorf("%s: %d commands, facts %+v", name, len(h.Commands()), f.Facts(name))
		}
	}
	if got := f.Names(inventory.RoleWorker); !slices.Equal(got, []string{"w1", "w2"}) {
		t.Errorf("workers %v", got)
	}
	err = f.Each(context.Background(), inventory.RoleWorker, func(_ context.Context, n inventory.Node, h remote.Host) error {
		if h.Name() != n.Name {
			t.Errorf("host %s for node %s", h.Name(), n.Name)
		}
		if n.Name == "w2" {
			return errors.New("boom")
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "w2: boom") || strings.Contains(err.Error(), "w1") {
		t.Errorf("Each error %v, want only w2's, named", err)
	}
	f.Close()
	if closed.Load() != 3 || f.Host("m1") != nil {
		t.Errorf("closed %d connections, want 3", closed.Load())
	}
}

// TestDialerNeedsATunnel: a host whose connection cannot open tunnels is an error naming it.
func TestDialerNeedsATunnel(t *testing.T) {
	f := New(nodes(), Options{Connect: func(_ context.Context, n inventory.Node) (remote.Host, error) {
		h := remotetest.New(n.Name)
		h.OnPrefix("", remotetest.Result{Exit: 1})
		return h, nil
	}})
	f.hosts["m1"] = remotetest.New("m1")
	if _, err := f.Dialer("m1"); err == nil || !strings.HasPrefix(err.Error(), "m1: ") {
		t.Errorf("Dialer = %v", err)
	}
}
