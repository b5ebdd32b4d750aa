package main

import (
	"errors"
	"flag"
	"io"
	"os"
)

type inventoryOptions struct {
	sysfsRoot string
	output    string
}

func (o *inventoryOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "/", "root of the sysfs tree to read (a fixture tree in tests)")
	fs.StringVar(&o.output, "o", "table", "output format: table or json")
}

func (o *inventoryOptions) validate() error {
	switch o.output {
	case "table", "json":
	default:
		return usagef("inventory: -o %q: want table or json", o.output)
	}
	if st, err := os.Stat(o.sysfsRoot); err != nil || !st.IsDir() {
		return usagef("inventory: --sysfs-root %q is not a directory", o.sysfsRoot)
	}
	return nil
}

// errNoDiscovery is returned until device discovery is part of the build.
var errNoDiscovery = errors.New("inventory: device discovery is not part of this build yet")

func inventoryCommand(args []string, _, stderr io.Writer) error {
	var o inventoryOptions
	fs := newFlagSet("inventory", stderr)
	o.addFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	return errNoDiscovery
}
