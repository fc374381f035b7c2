package pki

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEncryptionKeys: the first Ensure makes one 32-byte key, the next ones keep it; printing
// a key shows its name only; a damaged file is an error that names it and says what to do.
func TestEncryptionKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	o := Options{Dir: dir, Params: testParams(), Masters: testMasters[:1], Now: t0, Rand: seeded(31)}
	first, _ := ensure(t, o)
	o.Rand = seeded(32)
	again, ch := ensure(t, o)
	if len(ch) != 0 || !bytes.Equal(first.Encryption.Keys[0].Secret, again.Encryption.Keys[0].Secret) {
		t.Errorf("second Ensure: changes %v, key kept %v", ch, bytes.Equal(first.Encryption.Keys[0].Secret, again.Encryption.Keys[0].Secret))
	}
	k := first.Encryption.Keys[0]
	for _, f := range []string{"%v", "%s", "%+v", "%#v"} {
		if out := fmt.Sprintf(f, k) + fmt.Sprintf(f, first.Encryption); strings.Contains(out, k.Base64()) || strings.Contains(out, fmt.Sprint([]byte(k.Secret))) {
			t.Errorf("%s prints the key: %s", f, out)
		}
	}
	for _, bad := range []string{"keys: []\n", "keys:\n- name: a\n  secret: AAAA\n", "keys:\n- name: a\n  secret: " + k.Base64() + "\n- name: a\n  secret: " + k.Base64() + "\n", "other: 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, EncryptionFile), []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadEncryptionKeys(dir); err == nil || !strings.Contains(err.Error(), EncryptionFile) || !strings.Contains(err.Error(), "restore it") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
