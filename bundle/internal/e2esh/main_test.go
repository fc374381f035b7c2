package main

import "testing"

func TestIdentifier(t *testing.T) {
	for name, want := range map[string]bool{
		"PATH": true, "_x1": true, "data_1": true, "a": true,
		"data-1": false, "1-data-1": false, "1abc": false, "": false, "p.x": false,
	} {
		if got := identifier(name); got != want {
			t.Errorf("identifier(%q) = %v, want %v", name, got, want)
		}
	}
}
