package cnipolicy

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// decodeNetworkName is NetworkName's inverse for names it did not cut:
// the three strings, or ok false if name is not one it gives.
func decodeNetworkName(name string) (parts [3]string, ok bool) {
	var b strings.Builder
	n := 0
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '_':
			if n == 2 {
				return parts, false
			}
			parts[n] = b.String()
			b.Reset()
			n++
		case c == 'X':
			if i+2 >= len(name) {
				return parts, false
			}
			v, err := strconv.ParseUint(name[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(name[i+1:i+3]) != name[i+1:i+3] {
				return parts, false
			}
			b.WriteByte(byte(v))
			i += 2
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-':
			b.WriteByte(c)
		default:
			return parts, false
		}
	}
	if n != 2 {
		return parts, false
	}
	parts[2] = b.String()
	return parts, true
}

// Two claims whose namespace and name join to the same string with '-'
// have networks of their own; a claim's network name is the readable
// <namespace>_<claim>_<request> and a valid CNI network name.
func TestCNINetworkNameCollisions(t *testing.T) {
	for _, pair := range [][2][3]string{
		{{"a-b", "c", "r"}, {"a", "b-c", "r"}},
		{{"a", "b-c", "r"}, {"a", "b", "c-r"}},
		{{"ns", "claim.a", "r"}, {"ns.claim", "a", "r"}},
		{{"a_b", "c", "r"}, {"a", "b_c", "r"}},
		{{"a", "bX5Fc", "r"}, {"a", "b_c", "r"}},
	} {
		x, y := NetworkName(pair[0][0], pair[0][1], pair[0][2]), NetworkName(pair[1][0], pair[1][1], pair[1][2])
		if x == y {
			t.Errorf("%q and %q share the network name %q", pair[0], pair[1], x)
		}
	}
	if got := NetworkName("tenant-a", "pod-1-nic-x7k2p", "nic"); got != "tenant-a_pod-1-nic-x7k2p_nic" {
		t.Errorf("name = %q, want tenant-a_pod-1-nic-x7k2p_nic", got)
	}
	long := NetworkName(strings.Repeat("n", 63), strings.Repeat("c", 253), strings.Repeat("r", 63))
	if len(long) != maxPlainNetworkName+1 || ValidNetworkName(long) != nil || !strings.HasPrefix(long, strings.Repeat("n", 63)+"_ccc") {
		t.Errorf("the longest Kubernetes names give %q (%d bytes), want %d bytes, valid, beginning with the namespace", long, len(long), maxPlainNetworkName+1)
	}
}

// Over random triples of strings, of Kubernetes names' bytes and others,
// short and long: a name NetworkName does not cut decodes back to its
// triple (so no other triple has it), a cut one has the cut length, no
// two triples share a name, and every name is a valid CNI network name of
// bounded length when the namespace is not empty.
func TestCNINetworkNameInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "z", "0", "9", "-", ".", "_", "X", "x", "A", "/", "\x00", "é", "5F", "X5F"}
	random := func() string {
		n := rng.IntN(6)
		if rng.IntN(8) == 0 {
			n = 20 + rng.IntN(100)
		}
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	seen := map[string][3]string{}
	for range 50000 {
		triple := [3]string{random(), random(), random()}
		name := NetworkName(triple[0], triple[1], triple[2])
		if other, ok := seen[name]; ok && other != triple {
			t.Fatalf("%q and %q share the network name %q", other, triple, name)
		}
		seen[name] = triple
		switch {
		case len(name) > maxPlainNetworkName+1:
			t.Fatalf("%q: name of %d bytes, want at most %d", triple, len(name), maxPlainNetworkName+1)
		case len(name) == maxPlainNetworkName+1:
		default:
			if got, ok := decodeNetworkName(name); !ok || got != triple {
				t.Fatalf("%q: name %q decodes to %q, %v", triple, name, got, ok)
			}
		}
		if triple[0] != "" && ValidNetworkName(name) != nil {
			t.Fatalf("%q: %q is not a valid CNI network name", triple, name)
		}
	}
}

// A network's name becomes a file name (libcni's cache, host-local's
// directory of addresses): names that would be a path, or no name at all
// as a file, are refused.
func TestValidNetworkName(t *testing.T) {
	for _, name := range []string{"a", "net-1", "macvlan.conf_2", "A-b.C", "tenant-a_pod-1-nic-x7k2p_nic", strings.Repeat("n", MaxNetworkNameBytes)} {
		if err := ValidNetworkName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "../../../..", "..", ".", ".hidden", "-x", "_x", "a/b", "/etc", "a\x00b", "a b", "a\nb", "é", strings.Repeat("n", MaxNetworkNameBytes+1)} {
		err := ValidNetworkName(name)
		if err == nil {
			t.Errorf("%q: valid", name)
			continue
		}
		if !strings.Contains(err.Error(), "not a valid CNI network name") {
			t.Errorf("%q: %v", name, err)
		}
	}
}
