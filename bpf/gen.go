package bpf

// The objects are generated with bpf2go (a tool of go.mod) by make generate,
// which installs clang and the libbpf headers first; CI regenerates them
// and fails on any difference.
//go:generate go tool bpf2go -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type queue_stats xskRedirect xsk_redirect.c
//go:generate go tool bpf2go -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target bpfel -type count xdpCount xdp_count.c
