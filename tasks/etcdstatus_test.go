package tasks

import (
	"strings"
	"testing"

	"github.com/kforge/kforge/etcd"
	"github.com/kforge/kforge/fleet"
	"github.com/kforge/kforge/inventory"
)

// TestJudgeEtcd: quorum, leader, counts and advice from the members' answers and etcd's list.
func TestJudgeEtcd(t *testing.T) {
	var nodes []inventory.Node
	var listed []etcd.Member
	for i, name := range []string{"m1", "m2", "m3"} {
		ip := "198.51.100." + string(rune('2'+i))
		nodes = append(nodes, inventory.Node{Host: inventory.Host{Name: name, Address: ip}, Role: inventory.RoleMaster})
		listed = append(listed, etcd.Member{ID: uint64(0xa1 + i), Name: name, PeerURLs: []string{"https://" + ip + ":2380"}})
	}
	f := fleet.New(nodes, fleet.Options{})
	healthy := func(name, id string, leader bool) MemberStatus {
		return MemberStatus{Master: name, ID: id, Healthy: true, Leader: leader}
	}
	for _, c := range []struct {
		name       string
		members    []MemberStatus
		listed     []etcd.Member
		alarms     []string
		quorum     bool
		healthy    int
		all        bool
		advice     string
		leader     string
		othersLike string
	}{
		{"all healthy", []MemberStatus{healthy("m2", "a2", false), healthy("m1", "a1", true), healthy("m3", "a3", false)}, listed, nil, true, 3, true, "", "m1", ""},
		{"one lost", []MemberStatus{healthy("m1", "a1", true), healthy("m2", "a2", false), {Master: "m3", Problem: "host unreachable"}}, listed, nil, true, 2, false, "one more lost member may cost the quorum", "m1", ""},
		{"quorum lost", []MemberStatus{{Master: "m1", ID: "a1", Problem: "no leader"}, {Master: "m2", Problem: "host unreachable"}, {Master: "m3", Problem: "host unreachable"}}, nil, nil, false, 0, false, "kforge restore --snapshot", "", ""},
		{"alarm", []MemberStatus{healthy("m1", "a1", true), healthy("m2", "a2", false), healthy("m3", "a3", false)}, listed, []string{"NOSPACE on member a1"}, true, 3, false, "NOSPACE", "m1", ""},
		{"stranger", []MemberStatus{healthy("m1", "a1", true), healthy("m2", "a2", false), healthy("m3", "a3", false)},
			append(listed[:3:3], etcd.Member{ID: 0xff, PeerURLs: []string{"https://198.51.100.9:2380"}}), nil, true, 3, false, "no master of the inventory", "m1", "unstarted (ff, https://198.51.100.9:2380)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := EtcdReport{Members: c.members, Alarms: c.alarms}
			judge(&rep, f, inventory.RoleMaster, c.listed)
			if rep.Quorum != c.quorum || rep.Healthy != c.healthy || rep.AllHealthy() != c.all || rep.Leader != c.leader {
				t.Errorf("quorum %v, healthy %d, all healthy %v, leader %q; want %v, %d, %v, %q", rep.Quorum, rep.Healthy, rep.AllHealthy(), rep.Leader, c.quorum, c.healthy, c.all, c.leader)
			}
			if !strings.Contains(rep.Advice, c.advice) || (c.advice == "") != (rep.Advice == "") {
				t.Errorf("advice %q; want it to say %q", rep.Advice, c.advice)
			}
			if c.othersLike != "" && (len(rep.Others) != 1 || rep.Others[0] != c.othersLike) {
				t.Errorf("others %v; want [%s]", rep.Others, c.othersLike)
			}
			if rep.Members[0].Master != "m1" || rep.Members[2].Master != "m3" {
				t.Errorf("members not in the inventory's order: %+v", rep.Members)
			}
		})
	}
}
