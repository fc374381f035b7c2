package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/kforge/kforge/hostpath"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// Error is an etcd operation that failed on one master.
type Error struct {
	Host string // the master whose etcd was asked (Config.Host)
	Op   string // what was asked, e.g. "add member https://198.51.100.12:2380"
	Seen string // what the failure means, in kforge's words; empty when nothing more is known
	Err  error  // etcd's or gRPC's error
	Hint string // what to do next
}

// Error is one line: the master, the operation, what was seen and etcd's own words.
func (e *Error) Error() string {
	msg := fmt.Sprintf("etcd on %s: %s", e.Host, e.Op)
	if e.Seen != "" {
		msg += ": " + e.Seen
	}
	if e.Err != nil {
		msg += ": " + message(e.Err)
	}
	return msg
}

// Unwrap returns etcd's or gRPC's error (rpctypes errors compare with errors.Is).
func (e *Error) Unwrap() error { return e.Err }

// Details returns the message and the hint, for kforge's error printer.
func (e *Error) Details() []string {
	if e.Hint == "" {
		return []string{e.Error()}
	}
	return []string{e.Error(), "  hint: " + e.Hint}
}

// RemoteHost names the master (remote.WithHost does not wrap the error again).
func (e *Error) RemoteHost() string { return e.Host }

// message is err's text without gRPC's "rpc error: code = … desc =" wrapping.
func message(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// The peer URL given to Add, Remove and WaitStarted is part of Op; these are what etcd says when
// a change of membership must wait.
const (
	seenUnhealthy = "etcd refuses membership changes while the cluster is unhealthy (a member was added in the last seconds or one is down)"
	hintUnhealthy = "check every member: etcdctl member list; etcdctl endpoint health --cluster (with the apiserver-etcd-client certificate), start or remove the member that is down, then run again"
)

// The etcd CA and server certificate on a master (pki's etcd/ca and etcd/server), named in hints.
const (
	etcdCA         = hostpath.PKIDir + "/etcd/ca.crt"
	etcdServerCert = hostpath.PKIDir + "/etcd/server.crt"
)

// newError makes the *Error for op on host, saying what err means and what to do.
func newError(host, endpoint, op string, err error) *Error {
	e := &Error{Host: host, Op: op, Err: err}
	e.Seen, e.Hint = explain(host, endpoint, err)
	return e
}

// logCommand shows the end of the etcd pod's logs on its host, through the files kubelet writes
// (no CRI client needed: hosts whose runtime kforge installs have ctr, not crictl).
const logCommand = "tail -n 30 /var/log/pods/kube-system_etcd-*/etcd/*.log"

// explain says what err means and what to do about it. gRPC reports connection failures as
// text, so those are recognised by their words.
func explain(host, endpoint string, err error) (seen, hint string) {
	text := err.Error()
	logs := fmt.Sprintf("see etcd's log on %s: %s", host, logCommand)
	switch {
	case errors.Is(err, rpctypes.ErrUnhealthy):
		return seenUnhealthy, hintUnhealthy
	case errors.Is(err, rpctypes.ErrMemberNotEnoughStarted):
		return "etcd refuses the change: too few members would be running for a quorum (strict reconfiguration check)",
			"start the members that are down (etcdctl member list shows those without a name as never started), then run again"
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		strings.Contains(text, "raft proposal dropped"):
		return "etcd has no leader (a member added last has not started yet, or too many members are down)",
			"start the missing members so the cluster has a quorum again; etcdctl endpoint status --cluster shows who answers; " + logs
	case errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return "etcd accepted the request but did not commit it in time", "check the members' health (etcdctl endpoint health --cluster), then run again; " + logs
	case strings.Contains(text, "x509: certificate signed by unknown authority"):
		return "etcd's server certificate is not signed by the etcd CA kforge holds",
			fmt.Sprintf("compare %s on %s with etcd/ca.crt in kforge's PKI state: a master set up by another tool keeps its own CA", etcdCA, host)
	case strings.Contains(text, "x509: certificate is valid for"), strings.Contains(text, "x509: cannot validate certificate"):
		return "etcd's server certificate does not name " + serverName,
			fmt.Sprintf("etcd's server certificate on %s (%s) must name localhost and 127.0.0.1; kforge apply reissues it", host, etcdServerCert)
	case strings.Contains(text, "x509: certificate has expired"):
		return "a certificate has expired", fmt.Sprintf("check the dates: openssl x509 -noout -dates -in %s on %s, and kforge's apiserver-etcd-client certificate; renew them", etcdServerCert, host)
	case strings.Contains(text, "bad certificate"), strings.Contains(text, "unknown certificate authority"),
		strings.Contains(text, "certificate required"), strings.Contains(text, "expired certificate"):
		return "etcd refused kforge's client certificate",
			fmt.Sprintf("etcd on %s trusts the CA in --trusted-ca-file (%s); kforge's apiserver-etcd-client certificate must be signed by it", host, etcdCA)
	case strings.Contains(text, "connection refused"):
		return "nothing listens on " + endpoint,
			fmt.Sprintf("is etcd running on %s? %s; journalctl -u kubelet", host, logCommand)
	case strings.Contains(text, "connection reset"), strings.Contains(text, "handshake failed: EOF"), strings.Contains(text, "first record does not look like a TLS handshake"):
		return "the connection to " + endpoint + " closed during the handshake (is it etcd's TLS client port?)",
			fmt.Sprintf("check what listens there on %s: ss -ltnp | grep %s; %s", host, portOf(endpoint), logs)
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer before the deadline", logs
	case errors.Is(err, context.Canceled):
		return "", ""
	}
	return "", logs
}

func portOf(endpoint string) string {
	if i := strings.LastIndexByte(endpoint, ':'); i >= 0 {
		return endpoint[i+1:]
	}
	return endpoint
}
