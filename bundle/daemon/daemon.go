// Package daemon is what kforge's small host daemons (kforge-apiproxy, kforge-vip) share: their
// main (flags for the configuration and state files, a context that ends on SIGINT or SIGTERM),
// the strict reading of their JSON configuration, and the atomic writing of their state.
//
// The daemons are built into the bundle from scratch modules of their own, which get this
// package's source beside theirs (bundle's goModule.Kforge), so it imports the standard
// library only.
package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Main parses the -config and -state flags (with these defaults and usages) and runs run until
// it returns or SIGINT or SIGTERM ends its context; an error ends the process with its message.
func Main(config, configUsage, state, stateUsage string, run func(ctx context.Context, config, state string) error) {
	c := flag.String("config", config, configUsage)
	s := flag.String("state", state, stateUsage)
	flag.Parse()
	log.SetFlags(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, *c, *s)
	stop()
	if err != nil {
		log.Fatal(err)
	}
}

// ReadJSON decodes the JSON file into v, refusing fields v does not have; errors name the file.
func ReadJSON(file string, v any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// WriteAtomic writes data and a newline to file through a temporary file beside it, so a reader
// sees the old content or the new, never part of it.
func WriteAtomic(file string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
