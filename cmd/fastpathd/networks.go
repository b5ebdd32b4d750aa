package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/dra/nri"
)

// defaultNetworkAPISocket is where fastpathd networks looks for the CRI
// Network API: the chart's socket.
const defaultNetworkAPISocket = "/run/fastpath-netapi/network-api.sock"

// networkAPIOptions are the flags of the CRI Network API of fastpathd run.
type networkAPIOptions struct {
	socket     string
	cniConfDir string
}

func (o *networkAPIOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.socket, "network-api-socket", "", "serve the CRI Network API (SetPodNetwork, RemovePodNetwork, ListPodNetwork; fastpathd networks) on this unix socket, root's alone; empty: off")
	fs.StringVar(&o.cniConfDir, "network-api-cni-conf-dir", "/etc/cni/net.d", "the node's CNI configuration directory, whose first configuration the CRI Network API lists as the network "+netapi.FallbackName+"; empty: none")
}

func (o *networkAPIOptions) validate() error {
	if o.socket != "" && !filepath.IsAbs(o.socket) {
		return usagef("run: --network-api-socket %q: must be an absolute path", o.socket)
	}
	return nil
}

// networkAPI is the CRI Network API of a running daemon.
type networkAPI struct {
	server   *netapi.Server
	registry *netapi.Registry
	errs     chan error
}

// start serves the CRI Network API when --network-api-socket is set; the
// networks set through it are kept in stateDir/netapi. A nil networkAPI
// is off.
func (o *networkAPIOptions) start(ctx context.Context, stateDir string, binDirs []string, limit *dataplane.CNILimit, sources ...netapi.Source) (*networkAPI, error) {
	if o.socket == "" {
		return nil, nil
	}
	reg, err := netapi.NewRegistry(ctx, netapi.Options{
		StateFile:  filepath.Join(stateDir, "netapi", "networks.json"),
		CNIConfDir: o.cniConfDir,
		BinDirs:    binDirs,
		CNILimit:   limit,
		Sources:    sources,
	})
	if err != nil {
		return nil, fmt.Errorf("CRI Network API: %w", err)
	}
	srv, err := netapi.Serve(ctx, o.socket, reg)
	if err != nil {
		return nil, err
	}
	api := &networkAPI{server: srv, registry: reg, errs: make(chan error, 2)}
	go func() {
		if err := reg.Run(ctx); err != nil {
			api.errs <- fmt.Errorf("CRI Network API: %w", err)
		}
	}()
	go func() {
		if err, ok := <-srv.Err(); ok {
			api.errs <- err
		}
	}()
	return api, nil
}

// Err delivers a failure; never for an API that is off.
func (a *networkAPI) Err() <-chan error {
	if a == nil {
		return nil
	}
	return a.errs
}

func (a *networkAPI) stop() {
	if a != nil {
		a.server.Stop()
	}
}

const networksUsage = `Usage:
  fastpathd networks list [-o table|json]
  fastpathd networks set NAME -f FILE [--ip-range CIDR]...
  fastpathd networks remove NAME

Manage the node's networks through the daemon's CRI Network API
(--socket). set takes a CNI configuration (a .conflist, or a single .conf)
from FILE ("-": standard input). list shows every network with its status:
SANDBOX (sandboxes can be created and deleted on it), CONNECTIVITY (its
plugins answer CNI STATUS), and why not. ` + netapi.FallbackName + ` is the node's CNI
configuration directory's first file; it cannot be set or removed.
`

// networksCommand is fastpathd networks: a client of the CRI Network API.
func networksCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, networksUsage)
		return usagef("networks: want list, set or remove")
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("fastpathd networks "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, networksUsage+"\nFlags:\n"); fs.PrintDefaults() }
	socket := fs.String("socket", defaultNetworkAPISocket, "the daemon's --network-api-socket")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the answer")
	var output, file, namespace string
	var ranges listFlag
	switch verb {
	case "list":
		fs.StringVar(&output, "o", "table", "output: table or json")
	case "set":
		fs.StringVar(&file, "f", "", "the network's CNI configuration file (.conflist or .conf); -: standard input")
		fs.Var(&ranges, "ip-range", "a subnet of the network, for plugins with the ipRanges capability (repeatable)")
		fs.StringVar(&namespace, "namespace", "", "the network's metadata.namespace")
	case "remove":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, networksUsage)
		return nil
	default:
		return usagef("networks: unknown %q: want list, set or remove", verb)
	}
	// NAME may come before the flags or after them.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return usageError{err}
		}
	}
	if fs.NArg() > 0 {
		return usagef("networks %s: unexpected arguments %q", verb, fs.Args())
	}
	if (verb == "list") != (name == "") {
		if verb == "list" {
			return usagef("networks list takes no name")
		}
		return usagef("networks %s: want the network's NAME", verb)
	}
	client, conn, err := netapi.Dial(*socket)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	switch verb {
	case "list":
		if output != "table" && output != "json" {
			return usagef("networks list: -o %q: want table or json", output)
		}
		resp, err := client.ListPodNetwork(ctx, &netapi.ListPodNetworkRequest{})
		if err != nil {
			return fmt.Errorf("list the networks on %s: %w", *socket, err)
		}
		if output == "json" {
			return printJSON(stdout, resp)
		}
		return printNetworks(stdout, resp.GetNetworks())
	case "set":
		cfg, err := networkFromFile(name, namespace, file, ranges)
		if err != nil {
			return err
		}
		resp, err := client.SetPodNetwork(ctx, &netapi.SetPodNetworkRequest{Config: cfg})
		if err != nil {
			return fmt.Errorf("set network %s: %w", name, err)
		}
		st := resp.GetStatus()
		fmt.Fprintf(stdout, "network %s set: sandbox management %s, connectivity %s%s\n", name,
			yesNo(st.GetSandboxManagement()), yesNo(st.GetConnectivity()), because(st.GetMessage()))
	case "remove":
		if _, err := client.RemovePodNetwork(ctx, &netapi.RemovePodNetworkRequest{Name: name}); err != nil {
			return fmt.Errorf("remove network %s: %w", name, err)
		}
		fmt.Fprintf(stdout, "network %s removed\n", name)
	}
	return nil
}

// networkFromFile is the NetworkConfig of a CNI configuration file.
func networkFromFile(name, namespace, file string, ranges []string) (*netapi.NetworkConfig, error) {
	if file == "" {
		return nil, usagef("networks set: -f FILE is required: the network's CNI configuration")
	}
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usagef("networks set: %v", err)
	}
	c, err := netapi.FromConflist(data)
	if err != nil {
		return nil, usagef("networks set: %s: %v", file, err)
	}
	cfg := &netapi.NetworkConfig{Metadata: &netapi.NetworkMetadata{Name: name, Namespace: namespace}, Cniv1Config: c}
	for _, r := range ranges {
		cfg.IpRanges = append(cfg.IpRanges, &netapi.IPRange{Cidr: r})
	}
	return cfg, nil
}

func printNetworks(w io.Writer, networks []*netapi.PodNetworkResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tGENERATION\tPLUGINS\tSANDBOX\tCONNECTIVITY\tMESSAGE")
	for _, n := range networks {
		var plugins []string
		for _, p := range n.GetConfig().GetCniv1Config().GetPlugins() {
			plugins = append(plugins, p.GetType())
		}
		st := n.GetStatus()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", n.GetConfig().GetMetadata().GetName(), n.GetConfig().GetMetadata().GetGeneration(),
			orDash(strings.Join(plugins, ",")), yesNo(st.GetSandboxManagement()), yesNo(st.GetConnectivity()), orDash(st.GetMessage()))
	}
	return tw.Flush()
}

// printJSON writes the answer as protobuf JSON, indented stably.
func printJSON(w io.Writer, resp *netapi.ListPodNetworkResponse) error {
	raw, err := protojson.Marshal(resp)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func because(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// configs are the API's networks for the PodNetworks pods name; nil when
// the API is off.
func (a *networkAPI) configs() nri.NetworkConfigs {
	if a == nil {
		return nil
	}
	return a.registry
}
