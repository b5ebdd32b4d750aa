package v1alpha1

// Default fills in what a config for a device with a kernel interface, or
// one bound to vfio-pci or delegated, leaves unset: mode netdev, the interface named
// after the request, and for afxdp the xsk-redirect program, native
// attachment, one queue and zero-copy where possible; for macvlan bridge
// mode, for ipvlan l2, for vlan 802.1q. apiVersion and kind
// are set. Configs of memif devices are not defaulted: they have no mode.
func (c *InterfaceConfig) Default(request string) {
	c.APIVersion, c.Kind = GroupVersion, KindInterfaceConfig
	if c.Mode == "" {
		c.Mode = ModeNetdev
	}
	if c.Mode == ModeVFIO || c.Mode == ModeDelegate {
		return
	}
	if c.Interface == nil {
		c.Interface = &InterfaceSpec{}
	}
	if c.Interface.Name == "" {
		c.Interface.Name = request
	}
	switch c.Mode {
	case ModeMacvlan:
		if c.Macvlan == nil {
			c.Macvlan = &MacvlanConfig{}
		}
		if c.Macvlan.Mode == "" {
			c.Macvlan.Mode = MacvlanBridge
		}
	case ModeIPVLAN:
		if c.IPVLAN == nil {
			c.IPVLAN = &IPVLANConfig{}
		}
		if c.IPVLAN.Mode == "" {
			c.IPVLAN.Mode = IPVLANL2
		}
	case ModeVLAN:
		if c.VLAN != nil && c.VLAN.Protocol == "" {
			c.VLAN.Protocol = VLANProto8021Q
		}
	}
	if c.Mode != ModeAFXDP {
		return
	}
	if c.XDP == nil {
		c.XDP = &XDPConfig{}
	}
	if c.XDP.Program == "" {
		c.XDP.Program = XDPProgramXSKRedirect
	}
	if c.XDP.AttachMode == "" {
		c.XDP.AttachMode = AttachNative
	}
	if c.XDP.Queues == 0 {
		c.XDP.Queues = 1
	}
	if c.XDP.ZeroCopy == "" {
		c.XDP.ZeroCopy = ZeroCopyPrefer
	}
}

// Default fills in the mode of endpoints that leave it out: ethernet.
func (c *MemifConfig) Default() {
	for i := range c.Endpoints {
		if c.Endpoints[i].Mode == "" {
			c.Endpoints[i].Mode = MemifModeEthernet
		}
	}
}

// DefaultCNIVersion is the cniVersion of a CNI config that names none.
const DefaultCNIVersion = "1.0.0"
