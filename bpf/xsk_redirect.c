//go:build ignore

// xsk_redirect hands each packet to the AF_XDP socket registered in xsks
// for the packet's RX queue, and passes it to the kernel stack when no
// socket is registered there. It counts per queue.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAX_QUEUES 64

struct queue_stats {
	__u64 packets;    /* seen on the queue */
	__u64 redirected; /* handed to the queue's socket */
	__u64 passed;     /* passed to the stack: no socket registered */
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct queue_stats);
} xsk_stats SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	struct queue_stats *st = bpf_map_lookup_elem(&xsk_stats, &queue);
	long action = bpf_redirect_map(&xsks, queue, XDP_PASS);

	if (st) {
		__sync_fetch_and_add(&st->packets, 1);
		if (action == XDP_REDIRECT)
			__sync_fetch_and_add(&st->redirected, 1);
		else
			__sync_fetch_and_add(&st->passed, 1);
	}
	return action;
}

char __license[] SEC("license") = "GPL";
