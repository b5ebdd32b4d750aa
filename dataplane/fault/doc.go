// Package fault marks the points of fastpath's side effects where a test
// build may be killed. In a build with the faultinject tag, Point kills the
// process with SIGKILL when $FASTPATH_FAULT names it (a container's init
// process, immune to its own SIGKILL, exits at once with status 137
// instead), so that tests can
// show that a restart on the same state recovers from a crash at every
// point; in any other build Point does nothing.
package fault

// Env names the point to kill at: "name" kills at its first hit,
// "name#n" at its n-th.
const Env = "FASTPATH_FAULT"

// OnceEnv, when set, names a file: the process is killed only if the file
// does not exist, and creates it first, so that a daemon restarted with the
// same environment (a DaemonSet's pod) is killed once.
const OnceEnv = "FASTPATH_FAULT_ONCE"

// Points are every point fastpath marks, in the order of a claim's life.
// A test checks that the code marks exactly these.
var Points = []string{
	// Prepare of a fastpath.dev claim: an address of a node pool chosen,
	// not yet recorded; after its plan is recorded, before and after each
	// step (the step's kind names it), and between two VF settings, after
	// the bpffs for XDP pins is mounted and in a vfio-pci bind.
	"ipam.assigned", "prepare.recorded",
	"prepare.files.before", "prepare.files.applied",
	"prepare.vf.before", "prepare.vf.applied", "vf.setting",
	"prepare.channels.before", "prepare.channels.applied",
	"prepare.offloads.before", "prepare.offloads.applied",
	"prepare.xdp.before", "bpffs.mounted", "prepare.xdp.applied",
	"prepare.vfio.before", "vfio.override", "vfio.unbound", "prepare.vfio.applied",
	"prepare.cdi.before", "prepare.cdi.applied",
	// A claim's status (status.devices) about to be written and written:
	// after Prepare, and after the runtime's hooks.
	"claim.status.before", "claim.status.written",
	// The runtime's hooks: the record of the networks a pod selects (NPWG)
	// written, not yet synced nor committed; a netdev's attachment
	// recorded, moved into the pod, given its addresses, its RDMA device
	// put in the pod (made again or moved there; in exclusive mode, a
	// software one made in the host's namespace, not yet moved); a shared device's
	// sub-interface made in the pod; moved back, the sub-interface deleted;
	// a CNI network recorded, added, deleted; the default route an NPWG
	// element asks for not yet made.
	"npwg.admitted", "attach.recorded", "attach.moved", "attach.addressed", "attach.routed", "attach.rdma", "attach.rdma.made", "attach.shared.created",
	"detach.moved", "detach.shared.deleted", "detach.returned",
	"cni.add.recorded", "cni.add.done", "cni.del.done", "npwg.route",
	// The status of an IPAMClaim an NPWG element names (its owner, its
	// addresses) and a pod's network-status annotation, each about to be
	// written and written.
	"ipamclaim.status.before", "ipamclaim.status.written",
	"annotation.before", "annotation.written",
	// A ResourceSlice of the node's devices about to be written and
	// written: at start, and when a device is tainted unhealthy or
	// healthy again.
	"slice.before", "slice.written",
	// Unprepare: the runtime's part released, each step undone.
	"unprepare.released", "unprepare.undone",
	// An admin-access claim: its record written, its CDI spec written;
	// at Unprepare, its CDI spec removed (the views and the record not
	// yet).
	"admin.recorded", "admin.cdi", "admin.unprepare.cdi",
}
