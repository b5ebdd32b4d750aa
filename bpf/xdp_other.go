//go:build !linux

package bpf

import "github.com/cilium/ebpf"

// Program is a loaded program; XDP needs Linux.
type Program struct{ Name string }

func Load(name string) (*Program, error)         { return nil, ErrNotSupported }
func LoadPinned(string) (*Program, error)        { return nil, ErrNotSupported }
func (p *Program) Pin(string) error              { return ErrNotSupported }
func (p *Program) XSKMap() *ebpf.Map             { return nil }
func (p *Program) Stats(int) (QueueStats, error) { return QueueStats{}, ErrNotSupported }
func (p *Program) Close() error                  { return nil }
func Detach(string) error                        { return nil }
func Unpin(string) error                         { return nil }
func Attached(string, string) (int, error)       { return 0, ErrNotSupported }
func MountBPFFS(string) error                    { return ErrNotSupported }
func (p *Program) Attach(string, string, Mode, bool, string) (Mode, error) {
	return "", ErrNotSupported
}
