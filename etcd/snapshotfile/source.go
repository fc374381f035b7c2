package snapshotfile

import _ "embed"

// Source is verify.go, for the scratch module that builds kforge-etcd-snapshot.
//
//go:embed verify.go
var Source []byte
