package npwg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// specEntry is a network-status entry as the standard's text defines it
// (§5.3), to decode strictly: every key of §5.3 with its type, "name" and
// "default" required, and no other key but those in reverse domain name
// notation (with a period) and those the caller allows.
type specEntry struct {
	Name         *string         `json:"name"`
	Interface    string          `json:"interface"`
	IPs          []string        `json:"ips"`
	MAC          string          `json:"mac"`
	MTU          *uint           `json:"mtu"`
	Default      *bool           `json:"default"`
	DNS          *specDNS        `json:"dns"`
	DefaultRoute []string        `json:"default-route"`
	DeviceInfo   json.RawMessage `json:"device-info"`
}

type specDNS struct {
	Nameservers []string `json:"nameservers"`
	Domain      string   `json:"domain"`
	Search      []string `json:"search"`
}

var specKeys = []string{"name", "interface", "ips", "mac", "mtu", "default", "dns", "default-route", "device-info"}

// decodeSpecStrict decodes a network-status value as the standard's text
// says it must be, allowing besides its keys those of allowed.
func decodeSpecStrict(value string, allowed ...string) ([]specEntry, error) {
	var raws []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(value), &raws); err != nil {
		return nil, err
	}
	var out []specEntry
	defaults := 0
	for i, raw := range raws {
		for k := range raw {
			if !slices.Contains(specKeys, k) && !strings.Contains(k, ".") && !slices.Contains(allowed, k) {
				return nil, fmt.Errorf("entry %d: key %q: not §5.3's, and not in reverse domain name notation", i, k)
			}
		}
		known := map[string]json.RawMessage{}
		for _, k := range specKeys {
			if v, ok := raw[k]; ok {
				known[k] = v
			}
		}
		data, _ := json.Marshal(known)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var e specEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		switch {
		case e.Name == nil || *e.Name == "":
			return nil, fmt.Errorf("entry %d: no \"name\" (§5.3.1: required)", i)
		case e.Default == nil:
			return nil, fmt.Errorf("entry %d (%s): no \"default\" (§5.3.6: required)", i, *e.Name)
		case e.MAC != "" && e.Interface == "":
			return nil, fmt.Errorf("entry %d (%s): \"mac\" without \"interface\" (§5.3.4)", i, *e.Name)
		}
		for _, ip := range e.IPs {
			// §5.3.3: addresses; §5.4's example writes them with a prefix.
			if _, err := netip.ParseAddr(ip); err != nil {
				if _, err := netip.ParsePrefix(ip); err != nil {
					return nil, fmt.Errorf("entry %d (%s): ips: %q is no IP address", i, *e.Name, ip)
				}
			}
		}
		if *e.Default {
			defaults++
		}
		out = append(out, e)
	}
	if defaults > 1 {
		return nil, fmt.Errorf("%d entries with \"default\": true (§5.3.6: one at most)", defaults)
	}
	return out, nil
}

// What fastpath writes of the standard's examples (§5.4), and of an entry
// with every field, is read by a decoder written from the standard's text
// (every key of its type, "name" and "default" on every entry), allowing
// only "gateway", the deviation docs/conformance.md lists; the decoder
// itself refuses what the text forbids.
func TestNetworkStatusStrictDecoder(t *testing.T) {
	for value, want := range map[string]string{
		`[{"name": "a"}]`:                                                  `no "default"`,
		`[{"default": false}]`:                                             `no "name"`,
		`[{"name": "a", "default": false, "extra": 1}]`:                    `key "extra"`,
		`[{"name": "a", "default": "no"}]`:                                 "cannot unmarshal string",
		`[{"name": "a", "default": true}, {"name": "b", "default": true}]`: "one at most",
		`[{"name": "a", "default": false, "mac": "02:00:00:00:00:01"}]`:    `"mac" without "interface"`,
		`[{"name": "a", "default": false, "ips": ["ten"]}]`:                "no IP address",
	} {
		if _, err := decodeSpecStrict(value); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", value, err, want)
		}
	}
	if _, err := decodeSpecStrict(`[{"name": "a", "default": false, "org.example.key": 1}]`); err != nil {
		t.Errorf("a key in reverse domain name notation: %v", err)
	}

	files, err := filepath.Glob("testdata/status/spec-5.4-*.yaml")
	if err != nil || len(files) != 3 {
		t.Fatalf("examples %v, %v", files, err)
	}
	for _, file := range files {
		entries, err := DecodeNetworkStatus(specStatus(t, file))
		if err != nil {
			t.Fatal(err)
		}
		value, err := EncodeNetworkStatus(entries)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSpecStrict(value, "gateway")
		if err != nil {
			t.Errorf("%s, as fastpath writes it: %v\n%s", filepath.Base(file), err, value)
			continue
		}
		if len(got) != len(entries) {
			t.Fatalf("%s, as fastpath writes it: %d entries, want %d", filepath.Base(file), len(got), len(entries))
		}
		for i, e := range got {
			if *e.Default != entries[i].Default || *e.Name != entries[i].Name {
				t.Errorf("%s, as fastpath writes it: entry %d is %s, default %v; want %s, %v", filepath.Base(file), i, *e.Name, *e.Default, entries[i].Name, entries[i].Default)
			}
		}
	}
}
