package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// encryptionConfigInfo is the API server's metric that names the encryption configuration it
// uses by the sha256 of the file (k8s.io/apiserver's encryptionconfig metrics), set when it
// starts and each time it reloads the file.
var encryptionConfigInfo = regexp.MustCompile(`^apiserver_encryption_config_controller_last_config_info\{[^}]*hash="sha256:([0-9a-f]{64})"[^}]*\}`)

// EncryptionConfigHash is the sha256 (hex) of the encryption configuration file the API server
// that c reaches has loaded, read from its /metrics; "" when it does not say.
func EncryptionConfigHash(ctx context.Context, c kubernetes.Interface) (string, error) {
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("read the API server's metrics: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		if m := encryptionConfigInfo.FindStringSubmatch(sc.Text()); m != nil {
			return m[1], nil
		}
	}
	return "", sc.Err()
}

// RewriteSecrets writes every Secret of the cluster again, unchanged, a page at a time: the API
// server stores each with the key that now encrypts (it writes even an unchanged object whose
// stored form used another key). A Secret deleted meanwhile is skipped; one changed meanwhile
// was written with the current key already. It returns how many were written.
func RewriteSecrets(ctx context.Context, c kubernetes.Interface, progress func(done int)) (int, error) {
	done, cont := 0, ""
	for {
		list, err := c.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 250, Continue: cont})
		if err != nil {
			return done, fmt.Errorf("list Secrets: %w", err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			_, err := c.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
			switch {
			case err == nil:
				done++
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			default:
				return done, fmt.Errorf("write Secret %s/%s again: %w", s.Namespace, s.Name, err)
			}
		}
		if progress != nil {
			progress(done)
		}
		if cont = list.Continue; cont == "" {
			return done, nil
		}
	}
}
