package netapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// Parameters a plugin's configuration has outside CNIv1PluginConfig's
// parameters: its fields of their own, and what the runtime adds.
var reservedParameters = []string{"type", "capabilities", "name", "cniVersion", "runtimeConfig"}

// reservedParameter is the reserved parameter k sets, if any: plugins
// and libcni read keys in any letter case ("RuntimeConfig" is
// runtimeConfig).
func reservedParameter(k string) (string, bool) {
	f := cnipolicy.Fold(k)
	for _, r := range reservedParameters {
		if cnipolicy.Fold(r) == f {
			return r, true
		}
	}
	return "", false
}

// Conflist is the CNI configuration list of a network: what libcni runs.
// Its name is cniv1_config.network_name, else the network's name.
func Conflist(cfg *NetworkConfig) ([]byte, error) {
	c := cfg.GetCniv1Config()
	if c == nil {
		return nil, errors.New("no cniv1_config")
	}
	name := c.GetNetworkName()
	if name == "" {
		name = cfg.GetMetadata().GetName()
	}
	plugins := make([]map[string]any, 0, len(c.GetPlugins()))
	for i, p := range c.GetPlugins() {
		conf, err := pluginConf(p)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		plugins = append(plugins, conf)
	}
	if ranges := cfg.GetIpRanges(); len(ranges) > 0 {
		var cidrs []string
		for _, r := range ranges {
			cidrs = append(cidrs, r.GetCidr())
		}
		for i, p := range c.GetPlugins() {
			if !slices.Contains(p.GetCapabilities(), npwg.CapabilityIPRanges) {
				plugins[i] = withHostLocalRanges(plugins[i], cidrs)
			}
		}
	}
	list := map[string]any{"cniVersion": c.GetCniVersion(), "name": name, "plugins": plugins}
	if c.GetDisableCheck() {
		list["disableCheck"] = true
	}
	return json.Marshal(list)
}

// withHostLocalRanges gives a plugin's host-local IPAM that names no
// subnet of its own the network's IP ranges (a plugin that declares the
// ipRanges capability gets them at ADD instead, as runtimeConfig).
func withHostLocalRanges(conf map[string]any, cidrs []string) map[string]any {
	raw, ok := conf["ipam"].(json.RawMessage)
	if !ok {
		return conf
	}
	var ipam map[string]any
	if json.Unmarshal(raw, &ipam) != nil || ipam["type"] != "host-local" || ipam["ranges"] != nil || ipam["subnet"] != nil {
		return conf
	}
	ipam["ranges"] = npwg.IPRangeSets(cidrs)
	conf["ipam"] = ipam
	return conf
}

func pluginConf(p *CNIv1PluginConfig) (map[string]any, error) {
	conf := map[string]any{"type": p.GetType()}
	if len(p.GetCapabilities()) > 0 {
		caps := map[string]bool{}
		for _, c := range p.GetCapabilities() {
			caps[c] = true
		}
		conf["capabilities"] = caps
	}
	for k, v := range p.GetParameters() {
		if r, ok := reservedParameter(k); ok {
			return nil, fmt.Errorf("parameters[%q]: not a parameter (it is the plugin's %s)", k, r)
		}
		conf[k] = parameterValue(v)
	}
	return conf, nil
}

// parameterValue is a parameter as JSON: the value itself when it parses
// as JSON, else the string.
func parameterValue(v string) any {
	if raw, ok := jsonValue(v); ok {
		return raw
	}
	return v
}

func jsonValue(v string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return raw, true
}

// parameterString is a plugin configuration's value as a parameter: a
// string as it is unless it would read as JSON (then quoted), anything
// else as its JSON.
func parameterString(v json.RawMessage) string {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		if _, isJSON := jsonValue(s); !isJSON {
			return s
		}
	}
	return string(v)
}

// FromConflist reads a CNI configuration file's content, a configuration
// list or a single configuration, as a CNIv1Config. A single configuration
// is a list of its one plugin; without a cniVersion it is CNI 0.1.0, as
// CNI reads it.
func FromConflist(data []byte) (*CNIv1Config, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, fmt.Errorf("not a CNI configuration (a JSON object): %w", err)
	}
	c := &CNIv1Config{}
	if err := stringField(conf, "cniVersion", &c.CniVersion); err != nil {
		return nil, err
	}
	if err := stringField(conf, "name", &c.NetworkName); err != nil {
		return nil, err
	}
	_, rawPlugins, isList := cnipolicy.Get(conf, "plugins")
	if !isList {
		if c.CniVersion == "" {
			c.CniVersion = "0.1.0"
		}
		cnipolicy.Delete(conf, "cniVersion")
		cnipolicy.Delete(conf, "name")
		p, err := pluginFromConf(conf)
		if err != nil {
			return nil, err
		}
		c.Plugins = []*CNIv1PluginConfig{p}
		return c, nil
	}
	if _, raw, ok := cnipolicy.Get(conf, "disableCheck"); ok {
		if err := json.Unmarshal(raw, &c.DisableCheck); err != nil {
			return nil, fmt.Errorf("disableCheck must be a boolean: %w", err)
		}
	}
	var plugins []map[string]json.RawMessage
	if err := json.Unmarshal(rawPlugins, &plugins); err != nil {
		return nil, fmt.Errorf("plugins must be a list of objects: %w", err)
	}
	for i, pc := range plugins {
		p, err := pluginFromConf(pc)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		c.Plugins = append(c.Plugins, p)
	}
	return c, nil
}

func pluginFromConf(conf map[string]json.RawMessage) (*CNIv1PluginConfig, error) {
	p := &CNIv1PluginConfig{}
	if err := stringField(conf, "type", &p.Type); err != nil {
		return nil, err
	}
	if _, raw, ok := cnipolicy.Get(conf, "capabilities"); ok {
		var caps map[string]bool
		if err := json.Unmarshal(raw, &caps); err != nil {
			return nil, fmt.Errorf("capabilities must be an object of booleans: %w", err)
		}
		for c, on := range caps {
			if on {
				p.Capabilities = append(p.Capabilities, c)
			}
		}
		sort.Strings(p.Capabilities)
	}
	for k, v := range conf {
		if _, ok := reservedParameter(k); ok {
			continue
		}
		if p.Parameters == nil {
			p.Parameters = map[string]string{}
		}
		p.Parameters[k] = parameterString(v)
	}
	return p, nil
}

func stringField(conf map[string]json.RawMessage, key string, into *string) error {
	_, raw, ok := cnipolicy.Get(conf, key)
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s must be a string: %w", key, err)
	}
	return nil
}
