package pki

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BootstrapTokenUser is the user name kubeadm join puts in bootstrap-kubelet.conf.
const BootstrapTokenUser = "tls-bootstrap-token-user"

// Kubeconfig builds a kubeconfig the way kubeadm does (util/kubeconfig.CreateWithCerts):
// cluster named clusterName, user named after the certificate's CN, context "<user>@<cluster>".
// caPEM is the CA certificates the client trusts (one, or two while a CA is rotated).
func Kubeconfig(clusterName, server string, caPEM []byte, client *KeyPair) ([]byte, error) {
	cert, key, err := client.PEM()
	if err != nil {
		return nil, err
	}
	user := client.Cert.Subject.CommonName
	cfg := basic(clusterName, server, caPEM, user)
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	return clientcmd.Write(*cfg)
}

// BootstrapKubeconfig is a worker's bootstrap-kubelet.conf: the cluster CA and a bootstrap
// token. The token is a secret: callers must not log the result.
func BootstrapKubeconfig(clusterName, server string, caPEM []byte, token string) ([]byte, error) {
	if token == "" {
		return nil, fmt.Errorf("bootstrap-kubelet.conf needs a bootstrap token")
	}
	cfg := basic(clusterName, server, caPEM, BootstrapTokenUser)
	cfg.AuthInfos[BootstrapTokenUser] = &clientcmdapi.AuthInfo{Token: token}
	return clientcmd.Write(*cfg)
}

func basic(clusterName, server string, caPEM []byte, user string) *clientcmdapi.Config {
	ctx := user + "@" + clusterName
	return &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{clusterName: {Server: server, CertificateAuthorityData: caPEM}},
		Contexts:       map[string]*clientcmdapi.Context{ctx: {Cluster: clusterName, AuthInfo: user}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{},
		CurrentContext: ctx,
	}
}
