package e2e

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// serveDNS is the DNS server of the hosts' own network, as a user's hosts have one: on addr
// (UDP, "198.51.100.1:53"), it answers A queries for the names of zone (fully qualified,
// lowercase, to an IPv4 address) and REFUSED for anything else, until the test ends. It returns
// how many queries for zone's names it has answered so far.
func serveDNS(t *testing.T, addr string, zone map[string]string) (answered func() int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatalf("DNS server on %s: %v", addr, err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			size, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if reply, answer, ok := answerDNS(buf[:size], zone); ok {
				if _, err := pc.WriteTo(reply, from); err == nil && answer {
					n.Add(1)
				}
			}
		}
	}()
	return n.Load
}

// answerDNS is the reply to query: the zone's address for an A question of a name it holds
// (answer), NOERROR without answers for its names' other types, REFUSED for other names.
func answerDNS(query []byte, zone map[string]string) (reply []byte, answer, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addr, known := zone[strings.ToLower(q.Name.String())]
	if !known {
		rh.RCode = dnsmessage.RCodeRefused
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil {
		return nil, false, false
	}
	answer = known && q.Type == dnsmessage.TypeA
	if answer {
		a, err := netip.ParseAddr(addr)
		if err != nil || b.StartAnswers() != nil {
			return nil, false, false
		}
		if b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a.As4()}) != nil {
			return nil, false, false
		}
	}
	reply, err = b.Finish()
	return reply, answer, err == nil
}

// TestServeDNS: the upstream server answers its zone's A names, case aside, counts them, and
// refuses other names, as Go's resolver sees it.
func TestServeDNS(t *testing.T) {
	answered := serveDNS(t, "127.0.0.1:0", nil) // a port of its own: only that it starts and stops
	if answered() != 0 {
		t.Fatal("answered before any query")
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	answered = serveDNS(t, addr, map[string]string{"upstream.lab.test.": "198.51.100.77"})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", addr)
	}}
	ctx := context.Background()
	if got, err := r.LookupHost(ctx, "Upstream.Lab.Test"); err != nil || len(got) != 1 || got[0] != "198.51.100.77" {
		t.Errorf("lookup of the zone's name: %v, %v", got, err)
	}
	if got, err := r.LookupHost(ctx, "elsewhere.example."); err == nil {
		t.Errorf("lookup of another name answered: %v", got)
	}
	if answered() != 1 {
		t.Errorf("answered %d A queries of the zone, want 1", answered())
	}
}
