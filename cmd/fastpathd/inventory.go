package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

type discoveryOptions struct {
	devices.Options
	// memifConfig is --memif-config, the file discoverer loads into
	// Options.MemifEndpoints.
	memifConfig string
}

func (o *discoveryOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/", "directory that holds sys/ (a fixture tree in tests)")
	fs.StringVar(&o.MemifDir, "memif-dir", "", "directory scanned for memif sockets")
	fs.StringVar(&o.memifConfig, "memif-config", "", "file of static memif endpoints (kind MemifConfig)")
	fs.StringVar(&o.Filter, "filter", "", `CEL expression choosing the devices to publish, as in a DeviceClass selector, e.g. device.attributes["fastpath.dev"].kind == "sriov-vf"`)
	fs.StringVar(&o.Share, "share", "", `CEL expression, as --filter, choosing the published netdevs that pods share through sub-interfaces (macvlan, ipvlan, vlan), never moved whole, e.g. device.attributes["fastpath.dev"].ifName == "ens1f0"`)
	fs.Func("resource-name", `NAME=CEL: the devices the CEL expression (as --filter) admits have resource name NAME, which NetworkAttachmentDefinitions ask for with the annotation k8s.v1.cni.cncf.io/resourceName (published as attribute k8s.cni.cncf.io/resourceName); may be repeated, the first that admits a device names it; default fastpath.dev/KIND, e.g. intel.com/sriov_netdevice=device.attributes["fastpath.dev"].pfName == "ens1f0"`,
		func(v string) error {
			name, expr, ok := strings.Cut(v, "=")
			if !ok || name == "" || expr == "" {
				return fmt.Errorf("want NAME=CEL, e.g. intel.com/sriov_netdevice=true")
			}
			if err := devices.ValidResourceName(name); err != nil {
				return fmt.Errorf("resource name %q: %w", name, err)
			}
			o.ResourceNames = append(o.ResourceNames, devices.ResourceName{Name: name, Filter: expr})
			return nil
		})
	fs.IntVar(&o.ShareInterfaces, "share-interfaces", devices.DefaultShareInterfaces, "sub-interfaces a shared device gives (its capacity \"interfaces\")")
	fs.IntVar(&o.ShareBandwidthMbps, "share-bandwidth-mbps", 0, "bandwidth a shared device gives in Mbit/s (its capacity \"bandwidth\"): a claim asking for some has its transmit rate limited to it; 0: not published")
}

// discoverer builds the Discoverer, with the endpoints of --memif-config;
// bad options and a bad memif config are usage errors (exit 2).
func (o *discoveryOptions) discoverer(cmd string) (*devices.Discoverer, error) {
	if o.memifConfig != "" {
		cfg, err := v1alpha1.LoadMemifConfig(o.memifConfig)
		if err != nil {
			return nil, usagef("%s: %v", cmd, err)
		}
		o.MemifEndpoints = make([]devices.MemifEndpoint, 0, len(cfg.Endpoints))
		for _, e := range cfg.Endpoints {
			o.MemifEndpoints = append(o.MemifEndpoints, devices.MemifEndpoint{Name: e.Name, Role: e.Role, Mode: e.Mode, SocketPath: e.SocketPath})
		}
		o.MemifSource = o.memifConfig
	}
	o.Compile = func(expr string) (devices.Selector, error) { return filter.Compile(expr) }
	d, err := devices.New(o.Options)
	if errors.Is(err, devices.ErrBadOptions) {
		return nil, usagef("%s: %v", cmd, err)
	}
	return d, err
}

type inventoryOptions struct {
	discoveryOptions
	output   string
	nodeName string
}

func inventoryCommand(args []string, stdout, stderr io.Writer) error {
	var o inventoryOptions
	fs := newFlagSet("inventory", stderr)
	o.addFlags(fs)
	fs.StringVar(&o.output, "o", "table", "output format: table, json, or slices (the ResourceSlices run would publish, as YAML)")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "node name for -o slices (default $NODE_NAME, else the host name)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch o.output {
	case "table", "json":
	case "slices":
		if o.nodeName == "" {
			host, err := os.Hostname()
			if err != nil {
				return usagef("inventory: -o slices needs --node-name: %v", err)
			}
			o.nodeName = host
		}
	default:
		return usagef("inventory: -o %q: want table, json or slices", o.output)
	}
	d, err := o.discoverer("inventory")
	if err != nil {
		return err
	}
	// Warnings are printed below, for people, rather than logged.
	ctx := klog.NewContext(context.Background(), logr.Discard())
	inv, err := d.Discover(ctx)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	switch o.output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(inv)
	case "slices":
		for _, rs := range kubelet.ResourceSlices(devices.DriverName, o.nodeName, dra.Resources(o.nodeName, inv, nil, nil)) {
			data, err := yaml.Marshal(rs)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "---\n%s", data)
		}
		for _, w := range inv.Warnings {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		return nil
	}
	if err := writeTable(stdout, inv); err != nil {
		return err
	}
	for _, w := range inv.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return nil
}

// writeTable prints the inventory for people.
func writeTable(w io.Writer, inv devices.Inventory) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tPCI\tVENDOR:DEVICE\tDRIVER\tNETDEV\tPF/VF\tNUMA\tXDP")
	for _, d := range inv.Devices {
		pci, ids, driver, numa := "-", "-", "-", "-"
		if p := d.PCI; p != nil {
			pci, ids, driver = p.Address, p.Vendor+":"+p.Device, orDash(p.Driver)
			if p.NUMANode >= 0 {
				numa = strconv.Itoa(p.NUMANode)
			}
		}
		netdev, xdp := "-", "-"
		if n := d.Netdev; n != nil {
			netdev = n.Name
			if driver == "-" {
				driver = orDash(n.Driver)
			}
			xdp = xdpSummary(n.XDP)
		}
		sriov := "-"
		switch {
		case d.PF != nil:
			sriov = fmt.Sprintf("PF %d/%d VFs", d.PF.NumVFs, d.PF.TotalVFs)
		case d.VF != nil:
			sriov = fmt.Sprintf("VF %d of %s", d.VF.ID, d.VF.PFPCIAddress)
		case d.Memif != nil:
			sriov = d.Memif.Role + "/" + d.Memif.Mode
			netdev = d.Memif.SocketPath
		}
		fmt.Fprintln(tw, strings.Join([]string{d.Name, string(d.Kind), pci, ids, driver, netdev, sriov, numa, xdp}, "\t"))
	}
	return tw.Flush()
}

func xdpSummary(x devices.XDP) string {
	switch {
	case x.Supported == nil:
		return "unknown"
	case !*x.Supported:
		return "no"
	case x.ZeroCopy != nil && *x.ZeroCopy:
		return "yes, zero-copy"
	default:
		return "yes"
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
