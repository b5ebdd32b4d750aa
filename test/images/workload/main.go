// Command workload is the test bed's container image entrypoint, and, called
// as /pause, its sandbox image. It reports what a pod sees and then waits to
// be stopped.
//
//	workload ifaces   print "NAME MAC ADDR,ADDR" per interface and a last
//	                  line "-- end of interfaces", in one write, then wait
//	workload env      print the environment, the content of every file a
//	                  FASTPATH_DEVICE_INFO_* variable names, every device
//	                  metadata file (KEP-5304) on a line of its own, and the
//	                  device nodes in /dev/vfio, then wait
//	workload xsk      for every FASTPATH_XSKMAP_* variable, open an AF_XDP
//	                  socket on queue 0 of the request's interface (zero-copy
//	                  when the device has it and it is not off), register it
//	                  in the pinned XSKMAP, and print the frames received
//	workload memif    greet the memif endpoint of every MEMIF_SOCKET_*
//	                  variable as a slave (HELLO, INIT, ACK), then wait
//	workload dpdk-memif
//	                  run dpdk-testpmd (the dpdk image's) as the memif client
//	                  of the socket MEMIF_SOCKET_* names, forwarding every
//	                  packet back (io) after a first burst, its port's
//	                  counters printed every second, until SIGTERM
//	workload admin    for every FASTPATH_ADMIN_VIEW_* variable (an
//	                  admin-access claim's view of a device), print once
//	                  "view-dir VAR read-only" or "view-dir VAR writable" (a
//	                  file created in its directory, or refused), then every
//	                  second "view VAR JSON", the view on one line
//	workload netinfo  print the interfaces' masters, GSO/GRO sizes,
//	                  arp_ignore, arp_announce and GRO, the rules and the
//	                  routes of every table, and a last line "-- end of
//	                  netinfo", in one write; then, with $PROBE_TARGET, send
//	                  it a UDP datagram from each address every 300 ms
//	workload sleep    wait for SIGTERM
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/fastpath-dra/fastpath/bpf/xsk"
	"github.com/fastpath-dra/fastpath/devices/memif"
)

func main() {
	cmd := "sleep"
	if filepath.Base(os.Args[0]) != "pause" && len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	switch cmd {
	case "sleep":
	case "ifaces":
		if err := printInterfaces(); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
	case "env":
		printEnv()
	case "xsk":
		if err := consumeXSK(); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
	case "memif":
		if err := greetMemifs(); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
	case "admin":
		go watchViews()
	case "netinfo":
		if err := printNetinfo(); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		go probe()
	case "dpdk-memif":
		err := runTestpmd()
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	default:
		fmt.Fprintf(os.Stderr, "workload: unknown command %q (want ifaces, env, xsk, memif, dpdk-memif, admin, netinfo or sleep)\n", cmd)
		os.Exit(2)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

// watchViews prints the admin views every second (workload admin).
func watchViews() {
	var vars []string
	for _, kv := range os.Environ() {
		if name, _, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "FASTPATH_ADMIN_VIEW_") {
			vars = append(vars, name)
		}
	}
	for _, v := range vars {
		probe := filepath.Join(filepath.Dir(os.Getenv(v)), "probe")
		state := "writable"
		if err := os.WriteFile(probe, nil, 0o644); errors.Is(err, syscall.EROFS) {
			state = "read-only"
		} else if err != nil {
			state = "unwritable: " + err.Error()
		}
		fmt.Printf("view-dir %s %s\n", v, state)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ; ; <-tick.C {
		var out strings.Builder
		for _, v := range vars {
			data, err := os.ReadFile(os.Getenv(v))
			if err != nil {
				fmt.Fprintf(&out, "view %s error: %v\n", v, err)
				continue
			}
			fmt.Fprintf(&out, "view %s %s\n", v, strings.Join(strings.Fields(string(data)), " "))
		}
		_, _ = os.Stdout.WriteString(out.String())
	}
}

// ifacesEnd ends the listing of workload ifaces: a reader that has it has
// every interface.
const ifacesEnd = "-- end of interfaces"

func printInterfaces() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		var as []string
		for _, a := range addrs {
			as = append(as, a.String())
		}
		mac := i.HardwareAddr.String()
		if mac == "" {
			mac = "-"
		}
		fmt.Fprintf(&out, "%s %s %s\n", i.Name, mac, strings.Join(as, ","))
	}
	out.WriteString(ifacesEnd + "\n")
	_, err = os.Stdout.WriteString(out.String())
	return err
}

// metadataDir is where the kubelet plugins' CDI specs mount device
// metadata files.
const metadataDir = "/var/run/kubernetes.io/dra-device-attributes"

// envBegin and envEnd enclose the env listing, written at once: a reader
// (test/testbed's WaitPodLog) that has the first line waits for the last.
const (
	envBegin = "-- environment"
	envEnd   = "-- end of environment"
)

func printEnv() {
	var out strings.Builder
	out.WriteString(envBegin + "\n")
	for _, kv := range os.Environ() {
		out.WriteString(kv + "\n")
	}
	for _, kv := range os.Environ() {
		name, path, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "FASTPATH_DEVICE_INFO_") {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(&out, "%s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&out, "%s content: %s\n", name, strings.Join(strings.Fields(string(data)), ""))
	}
	_ = filepath.WalkDir(metadataDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(&out, "metadata %s: %v\n", path, err)
			return nil
		}
		// A stream of JSON objects, one line each: on one line, still a
		// stream.
		fmt.Fprintf(&out, "metadata %s %s\n", path, strings.ReplaceAll(strings.TrimSpace(string(data)), "\n", " "))
		return nil
	})
	nodes, _ := os.ReadDir("/dev/vfio")
	for _, n := range nodes {
		if info, err := n.Info(); err == nil {
			fmt.Fprintf(&out, "device node /dev/vfio/%s %s\n", n.Name(), info.Mode().Type())
		}
	}
	out.WriteString(envEnd + "\n")
	_, _ = os.Stdout.WriteString(out.String())
}

// testpmd is DPDK's test application in the dpdk image, with the PMDs it
// loads (memif, the ring mempool) in pmdDir.
const (
	testpmd = "/usr/bin/dpdk-testpmd"
	pmdDir  = "/usr/lib/dpdk-pmds"
)

// runTestpmd replaces the workload with dpdk-testpmd, the client of the
// first MEMIF_SOCKET_* variable's socket: the pod side of a memif, with
// nothing but what fastpath's CDI spec gave the container. It returns only
// if it cannot.
func runTestpmd() error {
	socket := ""
	for _, kv := range os.Environ() {
		if name, path, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "MEMIF_SOCKET_") {
			socket = path
			break
		}
	}
	if socket == "" {
		return errors.New("no MEMIF_SOCKET_* variable")
	}
	args := []string{testpmd, "--no-huge", "-m", "256", "--no-pci", "-d", pmdDir, "-l", "0,1",
		"--vdev=net_memif0,role=client,socket-abstract=no,socket=" + socket,
		"--", "--forward-mode=io", "--tx-first", "--auto-start", "--nb-cores=1", "--total-num-mbufs=8192", "--rxd=256", "--txd=256", "--stats-period=1"}
	return syscall.Exec(testpmd, args, os.Environ())
}

func greetMemifs() error {
	found := false
	for _, kv := range os.Environ() {
		name, path, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "MEMIF_SOCKET_") {
			continue
		}
		found = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := memif.Greet(ctx, path, memif.Init{ID: 1, Name: "workload"})
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("memif %s: HELLO from %q, versions %#x-%#x; INIT acknowledged\n", path, h.Name, h.MinVersion, h.MaxVersion)
	}
	if !found {
		return errors.New("no MEMIF_SOCKET_* variable")
	}
	return nil
}

// consumeXSK is the example AF_XDP consumer: what a pod does with an afxdp
// device.
func consumeXSK() error {
	found := false
	for _, kv := range os.Environ() {
		name, path, _ := strings.Cut(kv, "=")
		req, ok := strings.CutPrefix(name, "FASTPATH_XSKMAP_")
		if !ok {
			continue
		}
		found = true
		ifName := os.Getenv("FASTPATH_INTERFACE_" + req)
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return fmt.Errorf("interface %q of request %s: %w", ifName, req, err)
		}
		xsks, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			return fmt.Errorf("open the XSKMAP %s: %w", path, err)
		}
		zeroCopy := os.Getenv("FASTPATH_XDP_ZEROCOPY_" + req)
		mode := "zero-copy"
		var sock *xsk.Socket
		if zeroCopy != "off" {
			sock, err = xsk.Open(xsk.Options{Ifindex: ifc.Index, Queue: 0, ZeroCopy: true})
		}
		if sock == nil && zeroCopy != "required" {
			mode = "copy"
			sock, err = xsk.Open(xsk.Options{Ifindex: ifc.Index, Queue: 0})
		}
		if err != nil {
			return fmt.Errorf("AF_XDP socket on %s: %w", ifName, err)
		}
		if err := sock.Register(xsks, 0); err != nil {
			return err
		}
		fmt.Printf("xsk %s queue 0: registered, %s mode\n", ifName, mode)
		go func() {
			for {
				n, err := sock.Receive(time.Second)
				if err != nil {
					fmt.Fprintf(os.Stderr, "xsk %s: %v\n", ifName, err)
					return
				}
				if n > 0 {
					fmt.Printf("xsk %s queue 0: %d frames\n", ifName, sock.Received())
				}
			}
		}()
	}
	if !found {
		return errors.New("no FASTPATH_XSKMAP_* variable")
	}
	return nil
}
