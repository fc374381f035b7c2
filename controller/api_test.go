package controller

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kforge/kforge/controller/controllertest"
	"github.com/kforge/kforge/inventory"
)

// fromExample is a KforgeCluster whose spec is examples/name.yaml's inventory.
func fromExample(t *testing.T, name string) (*KforgeCluster, *inventory.Cluster) {
	t.Helper()
	path := filepath.Join("..", "examples", name+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := inventory.Parse(path, data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := yaml.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range inventoryHead {
		delete(fields, f)
	}
	fields["credentialsFrom"] = []any{map[string]any{"name": "ssh"}}
	spec, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	k := &KforgeCluster{TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: want.Name, Namespace: "default"}}
	if err := json.Unmarshal(spec, &k.Spec); err != nil {
		t.Fatal(err)
	}
	return k, want
}

// TestSpecIsTheInventory: a spec read from JSON splits into the inventory and the controller's
// fields, and the inventory it gives back is the example's, field for field.
func TestSpecIsTheInventory(t *testing.T) {
	for _, name := range []string{"single-master", "ha", "external-etcd"} {
		k, want := fromExample(t, name)
		if len(k.Spec.CredentialsFrom) != 1 || k.Spec.CredentialsFrom[0].Name != "ssh" || strings.Contains(string(k.Spec.Inventory), "credentialsFrom") {
			t.Errorf("%s: credentialsFrom %v; inventory %s", name, k.Spec.CredentialsFrom, k.Spec.Inventory)
		}
		inv, err := k.InventoryYAML()
		if err != nil {
			t.Fatal(err)
		}
		got, err := inventory.Parse("KforgeCluster default/"+k.Name, inv, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, inv)
		}
		if !reflect.DeepEqual(got.Masters, want.Masters) || !reflect.DeepEqual(got.Networking, want.Networking) || got.KubernetesVersion != want.KubernetesVersion || !reflect.DeepEqual(got.Etcd, want.Etcd) {
			t.Errorf("%s: the inventory from the spec differs from the file's:\n%s", name, inv)
		}
		// And back to JSON: the same object.
		b, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		var again KforgeCluster
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatal(err)
		}
		if c := again.DeepCopy(); !reflect.DeepEqual(c.Spec.CredentialsFrom, k.Spec.CredentialsFrom) || string(c.Spec.Inventory) != string(k.Spec.Inventory) {
			t.Errorf("%s: JSON round trip: %+v, want %+v", name, c.Spec, k.Spec)
		}
	}
	k, _ := fromExample(t, "single-master")
	k.Spec.Inventory = json.RawMessage(`{"name":"other","masters":[]}`)
	if _, err := k.InventoryYAML(); err == nil || !strings.Contains(err.Error(), "spec.name is the object's own") {
		t.Errorf("a spec with a name: %v", err)
	}
}

// startAPIServer is a real API server with the KforgeCluster CRD installed, and a client of it
// that knows KforgeClusters.
func startAPIServer(t *testing.T) (*rest.Config, client.Client) {
	t.Helper()
	crd, err := CRD()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := controllertest.StartAPIServer(t, crd)
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}

// TestCRDAgainstARealAPIServer: the CRD installs (a structural schema the API server accepts),
// an example's object is stored and read back whole, and what the inventory's schema refuses
// the API server refuses too, naming the field.
func TestCRDAgainstARealAPIServer(t *testing.T) {
	_, c := startAPIServer(t)
	ctx := context.Background()
	for _, name := range []string{"single-master", "ha", "external-etcd"} {
		k, _ := fromExample(t, name)
		if err := c.Create(ctx, k, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got KforgeCluster
		if err := c.Get(ctx, client.ObjectKeyFromObject(k), &got); err != nil {
			t.Fatal(err)
		}
		var want, have map[string]any
		_ = json.Unmarshal(k.Spec.Inventory, &want)
		_ = json.Unmarshal(got.Spec.Inventory, &have)
		if !reflect.DeepEqual(want, have) || !reflect.DeepEqual(got.Spec.CredentialsFrom, k.Spec.CredentialsFrom) {
			t.Errorf("%s: stored spec %s, want %s", name, got.Spec.Inventory, k.Spec.Inventory)
		}
	}
	for field, spec := range map[string]string{
		"spec.mastrs":   `{"mastrs":[{"name":"m","address":"198.51.100.2"}],"masters":[{"name":"m","address":"198.51.100.2"}]}`,
		"spec.firewall": `{"firewall":"shut","masters":[{"name":"m","address":"198.51.100.2"}]}`,
		"spec.masters":  `{"workers":[{"name":"w","address":"198.51.100.3"}]}`,
		"port":          `{"ssh":{"port":70000},"masters":[{"name":"m","address":"198.51.100.2"}]}`,
	} {
		k := &KforgeCluster{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "default"}}
		if err := json.Unmarshal([]byte(spec), &k.Spec); err != nil {
			t.Fatal(err)
		}
		err := c.Create(ctx, k, client.FieldValidation(metav1.FieldValidationStrict))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("spec %s: %v; want refused, naming %s", spec, err, field)
		}
	}
}
