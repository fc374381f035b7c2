package facts

import (
	"testing"

	"github.com/kforge/kforge/hostpath"
)

// TestPathsMatchTemplates: the paths facts looks at are where templates puts kforge's files.
func TestPathsMatchTemplates(t *testing.T) {
	for _, c := range [][2]string{
		{hostpath.ManifestsDir, hostpath.ManifestsDir},
		{hostpath.KubeletDropInPath, hostpath.KubeletDropInPath},
		{hostpath.EtcdDataDir, hostpath.EtcdDataDir},
	} {
		if c[0] != c[1] {
			t.Errorf("facts looks at %s, templates writes %s", c[0], c[1])
		}
	}
}
