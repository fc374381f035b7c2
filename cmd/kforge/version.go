package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/kforge/kforge/release"
)

// VersionCmd prints kforge's version.
type VersionCmd struct{}

func (VersionCmd) Run(s *streams, g *Globals) error {
	v := map[string]string{
		"kforge":     version,
		"go":         runtime.Version(),
		"platform":   runtime.GOOS + "/" + runtime.GOARCH,
		"kubernetes": release.Default(),
	}
	if g.Output == "json" {
		return json.NewEncoder(s.Out).Encode(v)
	}
	_, err := fmt.Fprintf(s.Out, "kforge %s (%s, %s)\ndefault Kubernetes %s\n", v["kforge"], v["go"], v["platform"], v["kubernetes"])
	return err
}
