//go:build ignore

// xdp_count counts packets and bytes per RX queue and passes every packet
// on: observability without changing the data path.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define MAX_QUEUES 64

struct count {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct count);
} count_stats SEC(".maps");

SEC("xdp")
int xdp_count(struct xdp_md *ctx)
{
	__u32 queue = ctx->rx_queue_index;
	struct count *c = bpf_map_lookup_elem(&count_stats, &queue);

	if (c) {
		__sync_fetch_and_add(&c->packets, 1);
		__sync_fetch_and_add(&c->bytes, (__u64)(ctx->data_end - ctx->data));
	}
	return XDP_PASS;
}

char __license[] SEC("license") = "GPL";
