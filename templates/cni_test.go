package templates

import "testing"

func TestFlannelCNIConfig(t *testing.T) {
	got, err := FlannelCNIConfig("10.244.1.0/24", "10.244.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cni-flannel.conflist", got)
	if _, err := FlannelCNIConfig("10.99.0.0/24", "10.244.0.0/16"); err == nil {
		t.Error("a node CIDR outside the pod subnet was accepted")
	}
	if _, err := FlannelCNIConfig("nope", "10.244.0.0/16"); err == nil {
		t.Error("a malformed node CIDR was accepted")
	}
}
