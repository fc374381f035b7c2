package main

import (
	"encoding/json"
	"fmt"

	"github.com/kforge/kforge/inventory"
)

// InventoryCmd groups commands about the inventory file itself.
type InventoryCmd struct {
	Validate InventoryValidateCmd `cmd:"" help:"Check inventory files; report every problem with file:line:column and how to fix it."`
	Schema   InventorySchemaCmd   `cmd:"" help:"Print the inventory's JSON Schema (for editor completion and validation)."`
}

// InventoryValidateCmd loads each file (the -i inventory when none is given).
type InventoryValidateCmd struct {
	Files []string `arg:"" optional:"" help:"Inventory files (default: the -i inventory)."`
}

func (c *InventoryValidateCmd) Run(s *streams, g *Globals) error {
	files := c.Files
	if len(files) == 0 {
		files = []string{g.Inventory}
	}
	var invalid inventory.Errors
	var results []map[string]any
	for _, f := range files {
		cl, err := inventory.Load(f)
		if err != nil {
			if es, ok := err.(inventory.Errors); ok {
				invalid = append(invalid, es...)
				continue
			}
			return err
		}
		r := map[string]any{"file": f, "valid": true, "cluster": cl.Name, "masters": len(cl.Masters), "workers": len(cl.Workers), "etcd": len(cl.Etcd)}
		var warnings []string
		for _, w := range cl.Warnings() {
			warnings = append(warnings, w.Error())
		}
		if warnings != nil {
			r["warnings"] = warnings
		}
		results = append(results, r)
	}
	if len(invalid) > 0 {
		return invalidInventory{invalid}
	}
	for _, r := range results {
		if g.Output == "json" {
			if err := json.NewEncoder(s.Out).Encode(r); err != nil {
				return err
			}
			continue
		}
		hosts := plural(r["masters"].(int), "master") + ", " + plural(r["workers"].(int), "worker")
		if n := r["etcd"].(int); n > 0 {
			hosts += ", " + plural(n, "etcd host")
		}
		fmt.Fprintf(s.Out, "%s: valid (cluster %s: %s)\n", r["file"], r["cluster"], hosts)
		if ws, ok := r["warnings"].([]string); ok {
			for _, w := range ws {
				fmt.Fprintf(s.Err, "warning: %s\n", w)
			}
		}
	}
	return nil
}

// invalidInventory makes inventory errors exit with exitInvalid: nothing was changed.
type invalidInventory struct{ inventory.Errors }

func (invalidInventory) ExitCode() int { return exitInvalid }

// InventorySchemaCmd prints the JSON Schema.
type InventorySchemaCmd struct{}

func (InventorySchemaCmd) Run(s *streams) error {
	b, err := inventory.Schema()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.Out, "%s\n", b)
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
