package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Suite is one package's test binary, built on the host and run in the
// guest.
type Suite struct {
	Package string // import path
	// Dir is the package's directory: the tests' working directory, in the
	// guest as on the host.
	Dir    string
	Binary string
}

// Name is the package's path in its module: dataplane, test/vm.
func (s Suite) Name() string { return strings.TrimSuffix(filepath.Base(s.Binary), ".test") }

// BuildSuites compiles the test binary of each package (go test -c) with
// the build tags into outDir.
func BuildSuites(ctx context.Context, tags, outDir string, pkgs ...string) ([]Suite, error) {
	module, err := goOutput(ctx, "list", "-m", "-f", "{{.Path}}")
	if err != nil {
		return nil, err
	}
	list, err := goOutput(ctx, append([]string{"list", "-f", "{{.ImportPath}}\t{{.Dir}}"}, pkgs...)...)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	var suites []Suite
	for line := range strings.Lines(list) {
		path, dir, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if !ok {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if rel == "" {
			rel = filepath.Base(module)
		}
		s := Suite{Package: path, Dir: dir, Binary: filepath.Join(outDir, strings.ReplaceAll(rel, "/", "-")+".test")}
		_ = os.Remove(s.Binary)
		if _, err := goOutput(ctx, "test", "-c", "-tags", tags, "-o", s.Binary, path); err != nil {
			return nil, err
		}
		if _, err := os.Stat(s.Binary); err != nil {
			return nil, fmt.Errorf("%s has no test files with build tags %q", path, tags)
		}
		suites = append(suites, s)
	}
	return suites, nil
}

func goOutput(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// Result is how a suite went.
type Result struct {
	Suite
	Exit                    int
	Passed, Failed, Skipped []string
	Took                    time.Duration
	// Err is set when the suite could not run to its end.
	Err error
	// Note says what else happened: that it ran again, and why.
	Note string
	// TimedOut says that the test binary reported its own timeout
	// (-test.timeout: "panic: test timed out after"). A binary the guest
	// could not end without having reported it was not run by the guest
	// for that long: the guest froze (Frozen).
	TimedOut bool
}

// Frozen says that the guest stopped running the suite's binary: the
// binary neither ended nor reported its own timeout, and the guest did
// not end it when asked. Under TCG this is a guest whose vCPUs lost
// their timer interrupts without the kernel reporting a stall (every
// CPU at once): the VM's fault, as ErrStalled.
func (r Result) Frozen() bool {
	return errors.Is(r.Err, ErrStillRuns) && !r.TimedOut
}

// count takes one line of the suite's output into the result.
func (r *Result) count(line string) {
	if m := topResult.FindStringSubmatch(line); m != nil {
		switch m[1] {
		case "PASS":
			r.Passed = append(r.Passed, m[2])
		case "FAIL":
			r.Failed = append(r.Failed, m[2])
		case "SKIP":
			r.Skipped = append(r.Skipped, m[2])
		}
	} else if m := benchLine.FindStringSubmatch(line); m != nil {
		r.Passed = append(r.Passed, m[1])
	} else if strings.HasPrefix(line, "panic: test timed out after ") {
		r.TimedOut = true
	}
}

// OK reports whether everything ran and passed: a skipped test counts
// against it, since in the VM everything the tests need is there.
func (r Result) OK() bool {
	return r.Err == nil && r.Exit == 0 && len(r.Failed) == 0 && len(r.Skipped) == 0 && len(r.Passed) > 0
}

var (
	topResult = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+)`)
	benchLine = regexp.MustCompile(`^(Benchmark\S+)\s+\d+\s+[0-9.]+ ns/op`)
)

// RunSuite runs the suite's binary with args in the guest, copying its
// output to out, and counts its top-level tests and its benchmarks.
func (v *VM) RunSuite(ctx context.Context, s Suite, args []string, out io.Writer) Result {
	r := Result{Suite: s}
	pr, pw := io.Pipe()
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(out, line)
			r.count(line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	t0 := time.Now()
	r.Exit, r.Err = v.Run(ctx, Command{Args: append([]string{s.Binary}, args...), Dir: s.Dir}, pw)
	r.Took = time.Since(t0)
	_ = pw.Close()
	<-counted
	return r
}
