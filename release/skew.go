package release

import (
	"fmt"
	"strings"
)

// skewPolicy is where the rules below come from.
const skewPolicy = "https://kubernetes.io/releases/version-skew-policy/"

// skew is how far one component's minor may be from kube-apiserver's.
type skew struct {
	component string
	older     int // minors the component may be behind kube-apiserver
	newer     int // minors it may be ahead of kube-apiserver
}

// skews is the Kubernetes version skew policy (https://kubernetes.io/releases/version-skew-policy/),
// one row per component, in minors relative to the kube-apiserver it works with (in an HA
// cluster whose instances differ, the rule holds against each of them):
//   - kubelet and kube-proxy must not be newer than kube-apiserver and may be up to three
//     minors older;
//   - kube-controller-manager and kube-scheduler must not be newer than kube-apiserver and may
//     be one minor older (the window of a live upgrade);
//   - kubectl is supported within one minor of kube-apiserver, older or newer;
//   - HA kube-apiserver instances are within one minor of each other.
var skews = []skew{
	{component: "kubelet", older: 3, newer: 0},
	{component: "kube-proxy", older: 3, newer: 0},
	{component: "kube-controller-manager", older: 1, newer: 0},
	{component: "kube-scheduler", older: 1, newer: 0},
	{component: "kubectl", older: 1, newer: 1},
	{component: "kube-apiserver", older: 1, newer: 1},
}

// upgradeStep is how many minors one upgrade may move: kube-apiserver must not skip a minor,
// even in a single-master cluster (the version skew policy's "Supported component upgrade
// order").
const upgradeStep = 1

// SkewOK returns nil when component (kubelet, kube-proxy, kube-controller-manager,
// kube-scheduler, kubectl, or another kube-apiserver instance) at version may work with
// kube-apiserver at apiserver under the Kubernetes version skew policy
// (https://kubernetes.io/releases/version-skew-policy/), or an error that says which minors
// it may have and what to upgrade first.
func SkewOK(component, apiserver, version string) error {
	var rule *skew
	for i := range skews {
		if skews[i].component == component {
			rule = &skews[i]
		}
	}
	if rule == nil {
		var known []string
		for _, s := range skews {
			known = append(known, s.component)
		}
		return fmt.Errorf("no version skew rule for component %q (kforge knows %s)", component, strings.Join(known, ", "))
	}
	a, err := parse(apiserver)
	if err != nil {
		return fmt.Errorf("kube-apiserver version: %w", err)
	}
	v, err := parse(version)
	if err != nil {
		return fmt.Errorf("%s version: %w", component, err)
	}
	lo, hi := a.minor-rule.older, a.minor+rule.newer
	allowed := fmt.Sprintf("the version skew policy allows %s %s with it (%s)", component, minorRange(a.major, lo, hi), skewPolicy)
	switch {
	case v.major != a.major:
		return fmt.Errorf("%s %s and kube-apiserver %s are of different major versions: %s", component, version, apiserver, allowed)
	case v.minor > hi:
		return fmt.Errorf("%s %s is too new for kube-apiserver %s: %s; upgrade kube-apiserver first, or use a %s of those minors", component, version, apiserver, allowed, component)
	case v.minor < lo:
		return fmt.Errorf("%s %s is too old for kube-apiserver %s: %s; upgrade %s first", component, version, apiserver, allowed, component)
	}
	return nil
}

// KubeletSkewOK returns nil when a kubelet at version kubelet may work with kube-apiserver at
// apiserver: not newer, and at most three minors older (SkewOK).
func KubeletSkewOK(apiserver, kubelet string) error {
	return SkewOK("kubelet", apiserver, kubelet)
}

// CanUpgrade returns nil when a cluster at Kubernetes version from may be upgraded to to:
// within a minor (a patch release, up or down), or to the next minor. Minors are never
// skipped nor downgraded (https://kubernetes.io/releases/version-skew-policy/). It does not
// say whether this kforge installs to: For does.
func CanUpgrade(from, to string) error {
	f, err := parse(from)
	if err != nil {
		return fmt.Errorf("upgrade from: %w", err)
	}
	t, err := parse(to)
	if err != nil {
		return fmt.Errorf("upgrade to: %w", err)
	}
	switch {
	case t.major != f.major:
		return fmt.Errorf("cannot upgrade from %s to %s: Kubernetes does not upgrade across major versions", from, to)
	case t.minor < f.minor:
		return fmt.Errorf("cannot upgrade from %s to %s: that downgrades the minor, which Kubernetes does not support; stay on a %s.x release", from, to, f.minorString())
	case t.minor > f.minor+upgradeStep:
		next := version{major: f.major, minor: f.minor + upgradeStep}
		return fmt.Errorf("cannot upgrade from %s to %s in one step: upgrades move one minor at a time; upgrade to a %s.x release first", from, to, next.minorString())
	}
	return nil
}

// minorRange is "v1.33 to v1.36", or "v1.36" alone.
func minorRange(major, lo, hi int) string {
	l, h := version{major: major, minor: max(lo, 0)}, version{major: major, minor: hi}
	if l == h {
		return l.minorString()
	}
	return l.minorString() + " to " + h.minorString()
}
