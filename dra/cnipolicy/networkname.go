package cnipolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// maxPlainNetworkName is the longest network name NetworkName gives
// uncut; a longer one is cut to maxPlainNetworkName+1 bytes, a length no
// uncut name has. libcni names its cache files
// <network>-<container ID>-<interface> (255 bytes at most, with a container
// ID of 64 and an interface name of 15).
const maxPlainNetworkName = 127

// NetworkName is the name of the CNI network of a claim's request, and
// so of the state its plugins keep under that name (host-local's directory
// of addresses, libcni's cached results): <namespace>_<claim>_<request>.
// No two requests share one: Kubernetes names hold no '_' (namespace
// "a-b" and claim "c" are not namespace "a" and claim "b-c"), and any
// byte that is not a lowercase letter, a digit, '.' or '-' (none in a
// Kubernetes name), or a '.' or '-' that would begin the name, is written
// as 'X' and its two hexadecimal digits, so that any three strings have a
// name of their own. A name longer than maxPlainNetworkName bytes is cut
// and ends in '_' and 32 hexadecimal digits of the SHA-256 of the whole.
//
// The name is part of the conflist recorded with a claim when it is
// prepared, which later runs (DEL among them) use as recorded: a claim
// prepared by a build that named networks otherwise keeps its name.
func NetworkName(namespace, claim, request string) string {
	var b strings.Builder
	for i, part := range []string{namespace, claim, request} {
		if i > 0 {
			b.WriteByte('_')
		}
		for j := range len(part) {
			c := part[j]
			plain := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-'
			if !plain || b.Len() == 0 && (c == '.' || c == '-') {
				b.WriteByte('X')
				b.WriteString(strings.ToUpper(hex.EncodeToString([]byte{c})))
				continue
			}
			b.WriteByte(c)
		}
	}
	name := b.String()
	if len(name) <= maxPlainNetworkName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxPlainNetworkName-32] + "_" + hex.EncodeToString(sum[:16])
}

// MaxNetworkNameBytes is the longest network name whose files fit a file
// name of 255 bytes: libcni's cache file <network>-<container ID>-<interface>,
// with a container ID of 64 bytes and an interface name of 15.
const MaxNetworkNameBytes = 255 - 64 - 15 - 2

// ValidNetworkName says why name cannot be the name of a CNI network, or
// nil. The name becomes part of file names: libcni's cache of results,
// <cache>/results/<network>-<container ID>-<interface>, and host-local's
// directory of addresses, <dataDir>/<network>, which its DEL walks. A name
// is a letter or digit, then letters, digits, '_', '.' or '-' (libcni's
// own rule, which it checks at ADD only: not at DEL, CHECK or GC, nor when
// it reads its cache), of at most MaxNetworkNameBytes bytes: no '/', no
// ".." or "." of its own, no leading dot, no NUL.
func ValidNetworkName(name string) error {
	if utils.ValidateNetworkName(name) != nil {
		return errors.New("not a valid CNI network name: it names files (libcni's cache, host-local's directory of addresses), " +
			"so it is a letter or digit, then letters, digits, '_', '.' or '-'")
	}
	if len(name) > MaxNetworkNameBytes {
		return fmt.Errorf("not a valid CNI network name: %d bytes, more than the %d that fit libcni's cache file names", len(name), MaxNetworkNameBytes)
	}
	return nil
}
