module github.com/kforge/kforge

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/google/go-containerregistry v0.22.1 // indirect
	github.com/invopop/jsonschema v0.14.0 // indirect
	github.com/kevinburke/ssh_config v1.6.0 // indirect
	github.com/kr/fs v0.1.0 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/pkg/sftp v1.13.12 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
	k8s.io/api v0.36.3 // indirect
	k8s.io/apimachinery v0.36.3 // indirect
	k8s.io/client-go v0.36.3 // indirect
	k8s.io/kubelet v0.36.3 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
