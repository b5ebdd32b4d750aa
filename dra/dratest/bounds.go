package dratest

import (
	"fmt"
	"strings"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// list is a JSON list of n items made by item.
func list(n int, item func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = item(i)
	}
	return "[" + strings.Join(items, ",") + "]"
}

// padded is a JSON object with spaces before its closing brace to n bytes.
func padded(doc string, n int) string {
	return doc[:len(doc)-1] + strings.Repeat(" ", n-len(doc)) + "}"
}

// ConfigSeeds are InterfaceConfigs at and just over each of their bounds,
// and one with as many problems as its bounds allow, for fuzz targets.
func ConfigSeeds() []string {
	addr := func(i int) string { return fmt.Sprintf(`"10.%d.%d.1/24"`, i/256, i%256) }
	wrong := func(i int) string { return fmt.Sprintf(`"%d/%s"`, i, strings.Repeat("x", 250)) }
	route := func(i int) string { return fmt.Sprintf(`{"destination": "10.%d.0.0/16"}`, i%256) }
	var seeds []string
	for _, n := range []int{0, 1} {
		seeds = append(seeds,
			InterfaceConfig(`"interface": {"name": "net1", "addresses": `+list(bounds.Addresses+n, addr)+`}`),
			InterfaceConfig(`"interface": {"name": "net1", "routes": `+list(bounds.Routes+n, route)+`}`),
			InterfaceConfig(`"colour": `+strings.Repeat("[", bounds.Depth-1+n)+strings.Repeat("]", bounds.Depth-1+n)),
			padded(InterfaceConfig(`"mode": "netdev"`), bounds.ConfigBytes+n),
		)
	}
	return append(seeds, InterfaceConfig(`"interface": {"name": "net1", "addresses": `+list(bounds.Addresses, wrong)+`}`))
}

// CNISeeds are CNI parameters at and just over each of their bounds, and
// one with as many host paths (each a problem) as its bounds allow, for
// fuzz targets.
func CNISeeds() []string {
	plugin := func(int) string { return `{"type": "macvlan"}` }
	argument := func(int) string { return `{"fieldPath": "a", "value": 1}` }
	path := func(int) string { return `"/a"` }
	var seeds []string
	for _, n := range []int{0, 1} {
		seeds = append(seeds,
			`{`+CNIHead+`, "plugins": `+list(bounds.Plugins+n, plugin)+`}`,
			`{`+CNIHead+`, "plugins": [{"type": "macvlan", "arguments": `+list(bounds.Arguments+n, argument)+`}]}`,
			`{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "config": {"cniVersion": "1.0.0", "plugins": `+
				list(bounds.Plugins+n, plugin)+`}}`,
			`{`+CNIHead+`, "plugins": [{"type": "macvlan", "config": {"a": `+list(bounds.Items+n, path)+`}}]}`,
			padded(`{`+CNIHead+`, "plugins": [{"type": "macvlan", "config": {"a": `+list(250, path)+`, "b": `+list(250, path)+
				`, "c": `+list(250, path)+`, "d": `+list(250, path)+`, "e": `+list(250, path)+`, "f": `+list(250, path)+`}}]}`, bounds.ConfigBytes+n),
		)
	}
	return seeds
}
