// Package bpf holds fastpath's XDP programs: their C sources, the Go and
// objects bpf2go generates from them, and the API to load, attach, pin and
// close them. It carries out what it is asked; it decides no policy.
package bpf
