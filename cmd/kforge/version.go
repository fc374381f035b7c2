package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"

	"github.com/kforge/kforge/release"
)

// VersionCmd prints kforge's version.
type VersionCmd struct{}

func (VersionCmd) Run(s *streams, g *Globals) error {
	if g.Output == "json" {
		return json.NewEncoder(s.Out).Encode(map[string]any{
			"kforge":              version,
			"go":                  runtime.Version(),
			"platform":            runtime.GOOS + "/" + runtime.GOARCH,
			"kubernetes":          release.Default(),
			"supportedKubernetes": release.Supported(),
			"releases":            release.Catalogued(),
		})
	}
	_, err := fmt.Fprintf(s.Out, "kforge %s (%s, %s)\ndefault Kubernetes %s; supported %s; catalogued releases %s\n",
		version, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH, release.Default(), release.SupportedList(), strings.Join(release.Catalogued(), ", "))
	return err
}
