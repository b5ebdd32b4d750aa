package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"sigs.k8s.io/yaml"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// The documentation is checked against the code, so that it cannot drift:
// every flag of every command and every Helm value is in the reference,
// every relative link and anchor resolves, and every YAML example passes
// fastpathd validate.

const docsRoot = "../.."

// docsMaxREADMELines is how long README.md may grow: it is the overview a
// newcomer reads in minutes, and the rest belongs in docs/.
const docsMaxREADMELines = 250

// docsFiles are the documents checked: README.md and docs/*.md, relative
// to the repository's root.
func docsFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(docsRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		rel, err := filepath.Rel(docsRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	if len(out) < 3 {
		t.Fatalf("documents: %v; want README.md and docs/*.md", out)
	}
	return out
}

// docsHeading is a heading of a Markdown document.
type docsHeading struct {
	level int
	text  string
	line  int // 1-based
}

// docsBlock is a fenced code block.
type docsBlock struct {
	lang   string
	start  int // the line of its first content line, 1-based
	text   string
	marker string // the line before the opening fence, trimmed, "" if blank
}

// docsMarkdown is a Markdown document, read line by line.
type docsMarkdown struct {
	file     string // relative to the repository's root
	lines    []string
	fenced   []bool // the line is part of a fenced code block, fences included
	headings []docsHeading
	blocks   []docsBlock
	anchors  map[string]bool
}

var docsATXHeading = regexp.MustCompile(`^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$`)

func docsRead(t *testing.T, file string) *docsMarkdown {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(docsRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	md := &docsMarkdown{file: file, lines: strings.Split(string(data), "\n"), anchors: map[string]bool{}}
	md.fenced = make([]bool, len(md.lines))
	var fence string // the opening fence's run of ` or ~, "" outside blocks
	var indent string
	var block *docsBlock
	var body []string
	for i, line := range md.lines {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			md.fenced[i] = true
			if strings.HasPrefix(trimmed, fence) && strings.Trim(strings.TrimSpace(trimmed), fence[:1]) == "" {
				block.text = strings.Join(body, "\n") + "\n"
				md.blocks = append(md.blocks, *block)
				fence, block, body = "", nil, nil
				continue
			}
			body = append(body, strings.TrimPrefix(line, indent))
			continue
		}
		if run := docsFenceRun(trimmed); run != "" {
			md.fenced[i] = true
			fence, indent = run, line[:len(line)-len(trimmed)]
			block = &docsBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, run)), start: i + 2}
			for j := i - 1; j >= 0; j-- {
				if prev := strings.TrimSpace(md.lines[j]); prev != "" {
					block.marker = prev
					break
				}
			}
			continue
		}
		if m := docsATXHeading.FindStringSubmatch(line); m != nil {
			md.headings = append(md.headings, docsHeading{level: len(m[1]), text: m[2], line: i + 1})
		}
	}
	if fence != "" {
		t.Errorf("%s:%d: a code block is never closed", file, block.start-1)
	}
	// Anchors as GitHub makes them: a repeated one gets -1, -2, ...
	seen := map[string]int{}
	for _, h := range md.headings {
		a := docsSlug(h.text)
		if n := seen[a]; n > 0 {
			seen[a] = n + 1
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		md.anchors[a] = true
	}
	return md
}

// docsFenceRun is the run of backticks or tildes opening a fenced code
// block, or "".
func docsFenceRun(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		n := 0
		for n < len(trimmed) && trimmed[n] == c[0] {
			n++
		}
		if n >= 3 {
			return trimmed[:n]
		}
	}
	return ""
}

var (
	docsInlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	docsCodeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// docsSlug is a heading's anchor as GitHub makes it: the heading's text
// (a link's text, a code span's content) in lower case, spaces as '-',
// every other character but letters, digits, '-' and '_' dropped.
func docsSlug(heading string) string {
	heading = docsInlineLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// sections is the text of the sections whose heading matches, each with
// its subsections, fenced code left out.
func (md *docsMarkdown) sections(match func(heading string) bool) string {
	var b strings.Builder
	for i, h := range md.headings {
		if !match(h.text) {
			continue
		}
		end := len(md.lines)
		for _, next := range md.headings[i+1:] {
			if next.level <= h.level {
				end = next.line - 1
				break
			}
		}
		for j := h.line - 1; j < end; j++ {
			if !md.fenced[j] {
				b.WriteString(md.lines[j])
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// docsCommand is a command of fastpathd with flags of its own: its
// arguments before --help, and the flags its --help lists.
type docsCommand struct {
	args  []string
	flags []string
}

func (c docsCommand) String() string { return "fastpathd " + strings.Join(c.args, " ") }

var (
	docsUsageCommand = regexp.MustCompile(`^\s+fastpathd ([a-z][a-z-]*)(?: ([a-z|-]+))?`)
	docsHelpFlag     = regexp.MustCompile(`^  -([^\s=]+)`)
)

// docsHelpFlags runs fastpathd with args as main does and gives the flags
// its help lists, and whether it listed any.
func docsHelpFlags(t *testing.T, args ...string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := runMain(args, &stdout, &stderr); code != 0 {
		t.Fatalf("fastpathd %s: exit %d: %s%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	var flags []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String() + "\n" + stderr.String()))
	for sc.Scan() {
		if m := docsHelpFlag.FindStringSubmatch(sc.Text()); m != nil {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// docsCommands are the commands of fastpathd's usage, each with the flags
// its own --help lists: the flag sets built as main builds them. A command
// whose help lists no flag but whose usage names verbs (networks
// list|set|remove) has a flag set per verb.
func docsCommands(t *testing.T) []docsCommand {
	t.Helper()
	var out []docsCommand
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(usage))
	for sc.Scan() {
		m := docsUsageCommand.FindStringSubmatch(sc.Text())
		if m == nil || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		if flags := docsHelpFlags(t, m[1], "--help"); len(flags) > 0 {
			out = append(out, docsCommand{args: []string{m[1]}, flags: flags})
			continue
		}
		if !strings.Contains(m[2], "|") {
			continue
		}
		for _, verb := range strings.Split(m[2], "|") {
			if flags := docsHelpFlags(t, m[1], verb, "--help"); len(flags) > 0 {
				out = append(out, docsCommand{args: []string{m[1], verb}, flags: flags})
			}
		}
	}
	names := map[string]bool{}
	for _, c := range out {
		names[c.args[0]] = true
	}
	for _, want := range []string{"run", "controller", "inventory", "validate", "probe", "networks"} {
		if !names[want] {
			t.Fatalf("found no flags of fastpathd %s in its help; the commands found: %v", want, out)
		}
	}
	return out
}

// Every flag of every command is in docs/reference.md, in a section whose
// heading names the command ("fastpathd run"), as a code span: `--flag`,
// `-flag` or `--flag VALUE`.
func TestDocsFlags(t *testing.T) {
	md := docsRead(t, "docs/reference.md")
	for _, cmd := range docsCommands(t) {
		named := regexp.MustCompile(`\bfastpathd ` + regexp.QuoteMeta(cmd.args[0]) + `\b`)
		text := md.sections(named.MatchString)
		if text == "" {
			t.Errorf("docs/reference.md: no heading names %q: its flags %v are not documented", "fastpathd "+cmd.args[0], cmd.flags)
			continue
		}
		for _, f := range cmd.flags {
			documented := regexp.MustCompile("`--?" + regexp.QuoteMeta(f) + "[`\\s=,\\[]")
			if !documented.MatchString(text) {
				t.Errorf("docs/reference.md: flag --%s of %s is not documented: no section whose heading names %q has `--%s`",
					f, cmd, "fastpathd "+cmd.args[0], f)
			}
		}
	}
}

const docsValuesFile = "deploy/helm/fastpath/values.yaml"

// docsHelmValues are the dotted key paths of the chart's values, each with
// its line in values.yaml. A map is followed down where values.schema.json
// gives it properties; one whose keys are the user's (a stringMap, a
// Kubernetes object passed through as it is, such as resources) is a value
// of its own.
func docsHelmValues(t *testing.T) map[string]int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(docsRoot, docsValuesFile))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("%s: %v", docsValuesFile, err)
	}
	schemaData, err := os.ReadFile(filepath.Join(docsRoot, "deploy/helm/fastpath/values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(schemaData, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	defs, _ := schema["definitions"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			def, _ := defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
			return def
		}
		return s
	}
	lines := docsValueLines(data)
	out := map[string]int{}
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		m, isMap := v.(map[string]any)
		var props map[string]any
		if s != nil {
			s = resolve(s)
			props, _ = s["properties"].(map[string]any)
		}
		// Down a map with keys, unless the schema says its keys are
		// the user's (an object without properties).
		if isMap && len(m) > 0 && (s == nil || props != nil) {
			for k, child := range m {
				childSchema, _ := props[k].(map[string]any)
				p := k
				if path != "" {
					p = path + "." + k
				}
				walk(p, child, childSchema)
			}
			return
		}
		out[path] = lines[path]
	}
	walk("", values, schema)
	if len(out) < 50 {
		t.Fatalf("%s: only %d values found", docsValuesFile, len(out))
	}
	return out
}

var docsYAMLKey = regexp.MustCompile(`^([A-Za-z0-9_./-]+):(\s|$)`)

// docsValueLines finds the line of each key path of a values file laid out
// as values.yaml is: nested maps indented, list items left alone.
func docsValueLines(data []byte) map[string]int {
	type frame struct {
		indent int
		key    string
	}
	var stack []frame
	out := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "-") {
			continue
		}
		m := docsYAMLKey.FindStringSubmatch(trimmed)
		if m == nil {
			continue
		}
		indent := len(line) - len(trimmed)
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, frame{indent, m[1]})
		keys := make([]string, len(stack))
		for j, f := range stack {
			keys[j] = f.key
		}
		if p := strings.Join(keys, "."); out[p] == 0 {
			out[p] = i + 1
		}
	}
	return out
}

// Every value of values.yaml is in docs/reference.md, in a section whose
// heading says "Helm values", as a code span of its whole path.
func TestDocsHelmValues(t *testing.T) {
	md := docsRead(t, "docs/reference.md")
	text := md.sections(func(h string) bool { return strings.Contains(h, "Helm values") })
	if text == "" {
		t.Fatal(`docs/reference.md: no section's heading says "Helm values"`)
	}
	values := docsHelmValues(t)
	paths := slices.Sorted(func(yield func(string) bool) {
		for p := range values {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range paths {
		if !strings.Contains(text, "`"+p+"`") {
			t.Errorf("docs/reference.md: Helm value %s (%s:%d) is not documented: no `%s` in the Helm values section", p, docsValuesFile, values[p], p)
		}
	}
}

// Every relative link of README.md and docs/*.md names a file that exists
// and, with an anchor, a heading of that document.
func TestDocsLinks(t *testing.T) {
	docs := map[string]*docsMarkdown{}
	read := func(file string) *docsMarkdown {
		if docs[file] == nil {
			docs[file] = docsRead(t, file)
		}
		return docs[file]
	}
	link := regexp.MustCompile(`!?\[[^\]]*\]\(\s*([^()\s]*)(?:\s+"[^"]*")?\s*\)`)
	for _, file := range docsFiles(t) {
		md := read(file)
		for i, line := range md.lines {
			if md.fenced[i] {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(docsCodeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				where := fmt.Sprintf("%s:%d", file, i+1)
				switch {
				case target == "":
					t.Errorf("%s: a link without a target", where)
					continue
				case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:"):
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					if strings.HasPrefix(path, "/") {
						t.Errorf("%s: link %s: an absolute path; link relative to %s", where, target, file)
						continue
					}
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if _, err := os.Stat(filepath.Join(docsRoot, dest)); err != nil {
						t.Errorf("%s: link %s: %s does not exist", where, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !read(dest).anchors[anchor] {
					t.Errorf("%s: link %s: no heading of %s has the anchor #%s", where, target, dest, anchor)
				}
			}
		}
	}
}

var (
	docsNoValidate   = regexp.MustCompile(`^<!--\s*no-validate\b:?\s*(.*?)\s*-->$`)
	docsValidateWith = regexp.MustCompile(`^<!--\s*validate:\s*(.*?)\s*-->$`)
	docsStdinLine    = regexp.MustCompile(`<stdin>:(\d+)`)
)

// Every yaml example of README.md and docs/*.md passes fastpathd validate
// (with the flags a <!-- validate: FLAGS --> line before it gives), and
// has an object validate judges. A block that is not a Kubernetes manifest
// says so, and why, on the line before it: <!-- no-validate: why -->.
func TestDocsYAMLExamples(t *testing.T) {
	checked := 0
	for _, file := range docsFiles(t) {
		md := docsRead(t, file)
		for _, b := range md.blocks {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			where := fmt.Sprintf("%s:%d", file, b.start-1)
			if m := docsNoValidate.FindStringSubmatch(b.marker); m != nil {
				if m[1] == "" {
					t.Errorf("%s: <!-- no-validate --> without a reason: say why the block is not a manifest (<!-- no-validate: why -->)", where)
				}
				continue
			}
			args := []string{"-f", "-"}
			if m := docsValidateWith.FindStringSubmatch(b.marker); m != nil {
				args = append(args, strings.Fields(m[1])...)
			}
			var stdout, stderr bytes.Buffer
			err := validateCommand(args, strings.NewReader(b.text), &stdout, &stderr)
			// validate's lines name the block's lines; say the document's.
			inDoc := func(s string) string {
				return docsStdinLine.ReplaceAllStringFunc(s, func(m string) string {
					n, _ := strconv.Atoi(strings.TrimPrefix(m, "<stdin>:"))
					return fmt.Sprintf("%s:%d", file, b.start+n-1)
				})
			}
			if err != nil {
				what := "refused"
				if errors.As(err, new(usageError)) {
					what = "not read"
				}
				t.Errorf("%s: the yaml example is %s by fastpathd validate %s: %v\n%s%s", where, what,
					strings.Join(args, " "), err, inDoc(stdout.String()), inDoc(stderr.String()))
				continue
			}
			unjudged := strings.Count(stderr.String(), "not a kind validate judges")
			if n := docsObjects(b.text); n == 0 || unjudged >= n {
				t.Errorf("%s: fastpathd validate judges no object of the yaml example (%s); if it is not a Kubernetes manifest, say so on the line before it: <!-- no-validate: why -->",
					where, strings.TrimSpace(inDoc(stderr.String())))
				continue
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no yaml example was validated")
	}
}

var docsSeparator = regexp.MustCompile(`^---(\s.*)?$`)

// docsObjects is how many documents of a YAML stream hold something.
func docsObjects(stream string) int {
	n := 0
	for _, doc := range docsSplit(stream) {
		var v any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil || v != nil {
			n++
		}
	}
	return n
}

// docsSplit splits a YAML stream at its "---" lines.
func docsSplit(stream string) []string {
	var docs []string
	var cur []string
	for _, line := range strings.Split(stream, "\n") {
		if docsSeparator.MatchString(line) {
			docs = append(docs, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, strings.Join(cur, "\n"))
}

// README.md stays the overview a newcomer reads in minutes.
func TestDocsREADMELength(t *testing.T) {
	md := docsRead(t, "README.md")
	n := len(md.lines)
	if n > 0 && md.lines[n-1] == "" {
		n--
	}
	if n > docsMaxREADMELines {
		t.Errorf("README.md: %d lines, more than %d: move the detail into docs/ and link it", n, docsMaxREADMELines)
	}
	if !strings.Contains(strings.Join(md.lines, "\n"), "make test") {
		t.Error("README.md: does not say how to run the tests (make test)")
	}
}

// TestDocsConformance: every test docs/conformance.md names exists, so that
// the table says what is shown, and the table names some.
func TestDocsConformance(t *testing.T) {
	md := docsRead(t, "docs/conformance.md")
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*)`")
	want := map[string]int{}
	for i, line := range md.lines {
		for _, m := range named.FindAllStringSubmatch(line, -1) {
			if _, ok := want[m[1]]; !ok {
				want[m[1]] = i + 1
			}
		}
	}
	if len(want) < 50 {
		t.Fatalf("docs/conformance.md names %d tests; the table is not read right", len(want))
	}
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]*)\(`)
	err := filepath.WalkDir(docsRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(data), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, line := range want {
		if !defined[name] {
			t.Errorf("docs/conformance.md:%d names %s, which no test file defines", line, name)
		}
	}

	// Every key fastpath writes beyond a standard's is listed, as `key`,
	// in that standard's section: the entries written with every field
	// set.
	section := func(heading string) string {
		var b strings.Builder
		in := false
		for _, line := range md.lines {
			if strings.HasPrefix(line, "## ") {
				in = line == "## "+heading
				continue
			}
			if in {
				b.WriteString(line + "\n")
			}
		}
		if b.Len() == 0 {
			t.Fatalf("docs/conformance.md has no section %q", heading)
		}
		return b.String()
	}
	npwgEntry, err := npwg.EncodeNetworkStatus([]nadv1.NetworkStatus{{Name: "ns/net", Interface: "net1", IPs: []string{"10.0.0.2"}, Mac: "02:00:00:00:00:01",
		Mtu: 1500, Default: true, DNS: nadv1.DNS{Nameservers: []string{"10.0.0.53"}}, Gateway: []string{"10.0.0.1"},
		DeviceInfo: &nadv1.DeviceInfo{Type: "pci", Version: "1.1.0", Pci: &nadv1.PciDevice{PciAddress: "0000:18:02.5"}}}})
	if err != nil {
		t.Fatal(err)
	}
	kepEntry, err := json.Marshal([]pnv1.NetworkStatus{pnv1.NewNetworkStatus("dataplane", "net1", true, []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")})})
	if err != nil {
		t.Fatal(err)
	}
	for _, std := range []struct {
		heading, written string
		keys             []string // the standard's
	}{
		{"Network Plumbing WG multi-network specification v1.3", npwgEntry, []string{"name", "interface", "ips", "mac", "mtu", "default", "dns", "default-route", "device-info"}},
		{"KEP-3698: multi-network", string(kepEntry), []string{"name", "interfaceName", "ip", "isDefaultGW"}},
	} {
		var entries []map[string]json.RawMessage
		if err := json.Unmarshal([]byte(std.written), &entries); err != nil || len(entries) != 1 {
			t.Fatalf("%s: %s: %v", std.heading, std.written, err)
		}
		text := section(std.heading)
		for key := range entries[0] {
			if !slices.Contains(std.keys, key) && !strings.Contains(text, "`"+key+"`") {
				t.Errorf("docs/conformance.md, %s: fastpath writes the key %q, which the standard does not have and the section does not list", std.heading, key)
			}
		}
	}
}
