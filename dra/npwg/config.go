package npwg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

var (
	// ErrNoConfig is the error of a network with no CNI configuration: an
	// empty spec.config and no file of its name (§3.4.1: the request
	// fails).
	ErrNoConfig = errors.New("no CNI configuration")
	// ErrCNIVersion is the error of a configuration whose cniVersion the
	// CNI library cannot run.
	ErrCNIVersion = errors.New("unsupported cniVersion")
)

const (
	// noVersion is what CNI reads a configuration without a cniVersion
	// as (the version decoder of CNI's library and of every plugin built
	// with it).
	noVersion = "0.1.0"
	// listVersion is the first CNI version with configuration lists.
	listVersion = "0.3.0"
	// SourceSpec is Config.Source for a configuration of spec.config.
	SourceSpec = "spec.config"
)

// Config is the CNI configuration of a NetworkAttachmentDefinition's
// network.
type Config struct {
	// List is what libcni runs. A single configuration is a list of that
	// one plugin, under the configuration's name and cniVersion, as libcni
	// itself runs single configurations.
	List *libcni.NetworkConfigList
	// Source is where it came from: SourceSpec, or a file's path.
	Source string
}

// LoadConfig finds the CNI configuration of a NetworkAttachmentDefinition
// by the rules of §3.4.1, in order: its spec.config when not empty; else
// the first configuration list (*.conflist, in name order) in confDir
// whose "name" is the object's name; else the first single configuration
// (*.conf, *.json) of that name; else an error wrapping ErrNoConfig. A
// spec.config is a tenant's: it is held to bounds.NetworkConfigBytes,
// bounds.Depth and bounds.Items before it is decoded, and to
// bounds.Plugins, with one error saying which bound and the size. A
// spec.config without a name gets the object's (§3.4.2). A configuration
// without a cniVersion is one of CNI 0.1.0, as CNI reads it; a name that
// is not a CNI network name (it names files: cnipolicy.ValidNetworkName),
// a version the CNI library cannot run, a list older than CNI 0.3.0 or a
// plugin type that is not a plain file name is an error. Errors name the
// object.
func LoadConfig(nad *nadv1.NetworkAttachmentDefinition, confDir string) (*Config, error) {
	if nad == nil || nad.Name == "" {
		return nil, errors.New("a NetworkAttachmentDefinition without a name")
	}
	wrap := func(err error) error {
		return fmt.Errorf("NetworkAttachmentDefinition %s: %w", nadName(nad), err)
	}
	if strings.TrimSpace(nad.Spec.Config) != "" {
		list, err := parseSpecConfig([]byte(nad.Spec.Config), nad.Name)
		if err != nil {
			return nil, wrap(fmt.Errorf("%s: %w", SourceSpec, err))
		}
		return &Config{List: list, Source: SourceSpec}, nil
	}
	if confDir == "" {
		return nil, wrap(fmt.Errorf("%w: spec.config is empty, and there is no CNI configuration directory to look for a configuration named %q in", ErrNoConfig, nad.Name))
	}
	c, err := loadFromDir(confDir, nad.Name)
	if err != nil {
		return nil, wrap(err)
	}
	return c, nil
}

// ParseConfigList reads a CNI configuration (a list, or a single one)
// from source as LoadConfig reads a spec.config, name being the name it
// gets when it has none.
func ParseConfigList(data []byte, name, source string) (*Config, error) {
	list, err := parseConfig(data, name)
	if err != nil {
		return nil, err
	}
	return &Config{List: list, Source: source}, nil
}

func nadName(nad *nadv1.NetworkAttachmentDefinition) string {
	if nad.Namespace == "" {
		return nad.Name
	}
	return nad.Namespace + "/" + nad.Name
}

// loadFromDir finds the configuration named name in dir (§3.4.1, second
// and third rules). Files that cannot be read are passed over, and named
// in the error when no file matches.
func loadFromDir(dir, name string) (*Config, error) {
	var unreadable []string
	lists, err := libcni.ConfFiles(dir, []string{".conflist"})
	if err != nil {
		return nil, fmt.Errorf("read the CNI configuration directory: %w", err)
	}
	slices.Sort(lists)
	for _, f := range lists {
		list, err := libcni.NetworkConfFromFile(f)
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", filepath.Base(f), err))
			continue
		}
		if list.Name != name {
			continue
		}
		if err := checkList(list, false); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		return &Config{List: list, Source: f}, nil
	}
	singles, err := libcni.ConfFiles(dir, []string{".conf", ".json"})
	if err != nil {
		return nil, fmt.Errorf("read the CNI configuration directory: %w", err)
	}
	slices.Sort(singles)
	for _, f := range singles {
		data, err := os.ReadFile(f)
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", filepath.Base(f), err))
			continue
		}
		conf, err := decodeObject(data)
		if err != nil {
			unreadable = append(unreadable, fmt.Sprintf("%s (%v)", filepath.Base(f), err))
			continue
		}
		if n, _ := conf["name"].(string); n != name {
			continue
		}
		list, err := singleList(conf)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		return &Config{List: list, Source: f}, nil
	}
	err = fmt.Errorf("%w: spec.config is empty, and %s has no configuration list (*.conflist) or configuration (*.conf, *.json) named %q", ErrNoConfig, dir, name)
	if len(unreadable) > 0 {
		err = fmt.Errorf("%w; files passed over: %s", err, strings.Join(unreadable, "; "))
	}
	return nil, err
}

// parseSpecConfig is parseConfig of a tenant's configuration, within its
// bounds.
func parseSpecConfig(data []byte, defaultName string) (*libcni.NetworkConfigList, error) {
	if err := bounds.CheckJSON(data, nil, bounds.NetworkConfigBytes, "a CNI configuration"); err != nil {
		return nil, boundError(err)
	}
	list, err := parseConfig(data, defaultName)
	if err != nil {
		return nil, err
	}
	if err := bounds.TooMany(field.NewPath("plugins"), len(list.Plugins), bounds.Plugins); err != nil {
		return nil, boundError(err)
	}
	return list, nil
}

// boundError is the error of a bound a configuration breaks, its field
// named within the configuration (none for the whole).
func boundError(e *field.Error) error {
	if e.Field == (*field.Path)(nil).String() {
		return errors.New(e.ErrorBody())
	}
	return errors.New(e.Error())
}

// parseConfig reads a spec.config: a configuration list when it has
// "plugins", else a single configuration. One without a name gets
// defaultName.
func parseConfig(data []byte, defaultName string) (*libcni.NetworkConfigList, error) {
	conf, err := decodeObject(data)
	if err != nil {
		return nil, err
	}
	switch name, ok := conf["name"]; {
	case !ok || name == "":
		conf["name"] = defaultName
	case !isString(name):
		return nil, fmt.Errorf("name must be a string, not %s", describe(name))
	}
	if _, ok := conf["plugins"]; ok {
		return listFromMap(conf)
	}
	return singleList(conf)
}

// listFromMap reads a configuration list.
func listFromMap(conf map[string]any) (*libcni.NetworkConfigList, error) {
	if v, ok := conf["cniVersion"]; ok && !isString(v) {
		return nil, fmt.Errorf("cniVersion must be a string, not %s", describe(v))
	}
	data, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	if err := checkList(list, false); err != nil {
		return nil, err
	}
	return list, nil
}

// singleList reads a single configuration, as a list of one plugin.
func singleList(conf map[string]any) (*libcni.NetworkConfigList, error) {
	v, ok := conf["cniVersion"]
	switch {
	case !ok || v == "":
		v = noVersion
		conf["cniVersion"] = v
	case !isString(v):
		return nil, fmt.Errorf("cniVersion must be a string, not %s", describe(v))
	}
	plugin, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	if _, err := libcni.NetworkPluginConfFromBytes(plugin); err != nil {
		return nil, err
	}
	data, err := json.Marshal(map[string]any{"cniVersion": v, "name": conf["name"], "plugins": []json.RawMessage{plugin}})
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(data)
	if err != nil {
		return nil, err
	}
	if err := checkList(list, true); err != nil {
		return nil, err
	}
	return list, nil
}

// checkList checks what libcni leaves to its caller: a name that is a CNI
// network name (libcni and host-local name files after it; libcni checks
// it at ADD only), a cniVersion it can run, plugins, and plugin types that
// are plain file names (a type is looked up in the plugin directories).
func checkList(list *libcni.NetworkConfigList, single bool) error {
	supported := version.All.SupportedVersions()
	switch v := list.CNIVersion; {
	case list.Name == "":
		return errors.New("name must not be empty")
	case cnipolicy.ValidNetworkName(list.Name) != nil:
		return fmt.Errorf("name %q: %w", list.Name, cnipolicy.ValidNetworkName(list.Name))
	case v == "":
		return fmt.Errorf("%w: the configuration list names no cniVersion this node's CNI library runs (%s); a list needs one, %s or later",
			ErrCNIVersion, strings.Join(supported, ", "), listVersion)
	case !slices.Contains(supported, v):
		return fmt.Errorf("%w: cniVersion %q is not one this node's CNI library runs (%s)", ErrCNIVersion, v, strings.Join(supported, ", "))
	case !single && olderThan(v, listVersion):
		return fmt.Errorf("%w: cniVersion %q: configuration lists need %s or later", ErrCNIVersion, v, listVersion)
	case len(list.Plugins) == 0:
		return errors.New("no plugins")
	}
	for i, p := range list.Plugins {
		if err := v1alpha1.ValidCNIPluginType(p.Network.Type); err != nil {
			return fmt.Errorf("plugins[%d].type %q: %w", i, p.Network.Type, err)
		}
	}
	return nil
}

func olderThan(v, than string) bool {
	newer, err := version.GreaterThanOrEqualTo(v, than)
	return err == nil && !newer
}

// decodeObject decodes one JSON object, keeping numbers as written.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %s", jsonError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not valid JSON: more after the first value")
	}
	conf, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object (a CNI configuration or configuration list), not %s", describe(v))
	}
	return conf, nil
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// describe names the kind of a decoded JSON value.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return kindString
	case json.Number, float64:
		return kindNumber
	case bool:
		return "a boolean"
	case []any:
		return kindList
	}
	return kindObject
}
