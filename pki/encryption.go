package pki

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"sigs.k8s.io/yaml"
)

// EncryptionFile is where the keys that encrypt Secrets in etcd live in the PKI dir (0600),
// beside the CA keys: whoever has an etcd snapshot and this file can read every Secret.
const EncryptionFile = "encryption.yaml"

// EncryptionKey is one key of the API servers' EncryptionConfiguration: 32 random bytes, the
// key size of both secretbox and aescbc (AES-256).
type EncryptionKey struct {
	// Name is what the API server prefixes each value it encrypts with ("k20261127t170512"),
	// so the reader finds the key that wrote it.
	Name   string `json:"name"`
	Secret []byte `json:"secret"` // base64 in the file, never printed
}

// String never shows the key.
func (k EncryptionKey) String() string { return k.Name }

// GoString never shows the key either (%#v).
func (k EncryptionKey) GoString() string { return "pki.EncryptionKey{Name: " + k.Name + "}" }

// EncryptionKeys are the cluster's keys, the one that encrypts first; the others only decrypt
// (a key rotation in progress).
type EncryptionKeys struct {
	Keys []EncryptionKey `json:"keys"`
	// Rotation is the key rotation in progress (kforge secrets rotate-key); nil when none.
	Rotation *KeyRotation `json:"rotation,omitempty"`
}

// KeyRotation is a key rotation in progress: the phase the keys are in, the new key.
type KeyRotation struct {
	Phase   KeyPhase  `json:"phase"`
	New     string    `json:"new"` // the new key's name
	Started time.Time `json:"started"`
}

// KeyPhase is a phase of a key rotation. In each, the API servers' configuration lists the keys
// as the phase says, and the phase is done once every API server has loaded it:
//   - add: the old key encrypts, the new one is known (every API server can read what the
//     others will write with it);
//   - write: the new key encrypts, the old one still decrypts;
//   - rewrite: every Secret is written again (with the new key), and none is left in etcd
//     under the old one;
//   - drop: the old key is gone from every file.
type KeyPhase string

const (
	KeyAdd     KeyPhase = "add"
	KeyWrite   KeyPhase = "write"
	KeyRewrite KeyPhase = "rewrite"
	KeyDrop    KeyPhase = "drop"
)

// StartKeyRotation makes a new key and records the rotation in dir, in phase add; a rotation in
// progress is returned as it is, to be resumed.
func StartKeyRotation(dir string, now time.Time, random io.Reader) (*EncryptionKeys, error) {
	ks, err := LoadEncryptionKeys(dir)
	if err != nil {
		return nil, err
	}
	if ks == nil {
		return nil, fmt.Errorf("no encryption key in %s: kforge apply makes the first one", dir)
	}
	if ks.Rotation != nil {
		return ks, nil
	}
	k, err := NewEncryptionKey(now, random)
	if err != nil {
		return nil, err
	}
	if slices.ContainsFunc(ks.Keys, func(o EncryptionKey) bool { return o.Name == k.Name }) {
		return nil, fmt.Errorf("a key named %s exists already: start the rotation again in a second", k.Name)
	}
	next := &EncryptionKeys{Keys: append(slices.Clone(ks.Keys), k), Rotation: &KeyRotation{Phase: KeyAdd, New: k.Name, Started: now.UTC()}}
	return next, SaveEncryptionKeys(dir, next)
}

// Advance is the keys in phase p of ks's rotation: in write and rewrite the new key first, in
// drop the new key alone.
func (ks *EncryptionKeys) Advance(p KeyPhase) (*EncryptionKeys, error) {
	if ks.Rotation == nil {
		return nil, errors.New("no key rotation in progress")
	}
	i := slices.IndexFunc(ks.Keys, func(k EncryptionKey) bool { return k.Name == ks.Rotation.New })
	if i < 0 {
		return nil, fmt.Errorf("the new key %s of the rotation is not among the keys", ks.Rotation.New)
	}
	rot := *ks.Rotation
	rot.Phase = p
	next := &EncryptionKeys{Rotation: &rot}
	switch p {
	case KeyAdd:
		next.Keys = append(slices.Delete(slices.Clone(ks.Keys), i, i+1), ks.Keys[i])
	case KeyWrite, KeyRewrite:
		next.Keys = append([]EncryptionKey{ks.Keys[i]}, slices.Delete(slices.Clone(ks.Keys), i, i+1)...)
	case KeyDrop:
		next.Keys = []EncryptionKey{ks.Keys[i]}
	default:
		return nil, fmt.Errorf("unknown phase %q", p)
	}
	return next, nil
}

// NewEncryptionKey makes a key named after now from random's bytes.
func NewEncryptionKey(now time.Time, random io.Reader) (EncryptionKey, error) {
	k := EncryptionKey{Name: "k" + now.UTC().Format("20060102t150405"), Secret: make([]byte, 32)}
	if _, err := io.ReadFull(random, k.Secret); err != nil {
		return EncryptionKey{}, fmt.Errorf("pki: encryption key: %w", err)
	}
	return k, nil
}

// ParseEncryptionKeys reads the file's contents, checking every key.
func ParseEncryptionKeys(data []byte) (*EncryptionKeys, error) {
	var ks EncryptionKeys
	if err := yaml.UnmarshalStrict(data, &ks); err != nil {
		return nil, err
	}
	if len(ks.Keys) == 0 {
		return nil, errors.New("no keys")
	}
	seen := map[string]bool{}
	for _, k := range ks.Keys {
		if k.Name == "" || seen[k.Name] {
			return nil, fmt.Errorf("key %q: names must be set and unique", k.Name)
		}
		if len(k.Secret) != 32 {
			return nil, fmt.Errorf("key %q: %d bytes, want 32", k.Name, len(k.Secret))
		}
		seen[k.Name] = true
	}
	return &ks, nil
}

// Encode is the file's contents.
func (ks *EncryptionKeys) Encode() ([]byte, error) { return yaml.Marshal(ks) }

// LoadEncryptionKeys reads dir's keys; nil when there are none yet.
func LoadEncryptionKeys(dir string) (*EncryptionKeys, error) {
	path := filepath.Join(dir, EncryptionFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ks, err := ParseEncryptionKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v; restore it from a backup of the state dir: without it no API server can read the Secrets in etcd", path, err)
	}
	return ks, nil
}

// SaveEncryptionKeys writes dir's keys atomically (0600), under dir's lock.
func SaveEncryptionKeys(dir string, ks *EncryptionKeys) error {
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	data, err := ks.Encode()
	if err != nil {
		return err
	}
	return Options{}.write(filepath.Join(dir, EncryptionFile), data, 0o600)
}

// ensureEncryption loads the keys, or makes the first one; a rotation in progress is a warning.
func ensureEncryption(o Options) (*EncryptionKeys, []Change, error) {
	ks, err := LoadEncryptionKeys(o.Dir)
	if err != nil {
		return nil, nil, err
	}
	if ks != nil && ks.Rotation != nil {
		return ks, []Change{{Key: "encryption", Action: "warning", Reason: fmt.Sprintf("key rotation in phase %s since %s: kforge secrets rotate-key finishes it", ks.Rotation.Phase, ks.Rotation.Started.Format(time.RFC3339))}}, nil
	}
	if ks != nil {
		return ks, nil, nil
	}
	k, err := NewEncryptionKey(o.Now, o.Rand)
	if err != nil {
		return nil, nil, err
	}
	ks = &EncryptionKeys{Keys: []EncryptionKey{k}}
	data, err := ks.Encode()
	if err != nil {
		return nil, nil, err
	}
	if err := o.write(filepath.Join(o.Dir, EncryptionFile), data, 0o600); err != nil {
		return nil, nil, err
	}
	return ks, []Change{{Key: "encryption", Action: "created", Reason: "missing"}}, nil
}

// Base64 is how the API server's EncryptionConfiguration writes the key.
func (k EncryptionKey) Base64() string { return base64.StdEncoding.EncodeToString(k.Secret) }
