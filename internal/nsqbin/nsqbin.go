// Package nsqbin builds the nsqd, nsqlookupd and nsqadmin binaries that
// spillq's tests run, from the tools module nsqbridge/internal/nsqtools (which pins
// github.com/nsqio/nsq), once per toolchain and tools go.sum rather than
// once per test run.
//
// Linking nsqd and nsqlookupd takes a second or two each, and a test binary
// that built them into a fresh temporary directory paid it on every run.
// The binaries depend only on the toolchain, the build environment and the
// tools module's go.mod and go.sum (which fix every source file through the
// module checksums), so Build keeps them in the user cache directory under a
// hash of those, shared by every package and worktree that uses the same.
// A cold cache is filled through a private temporary directory renamed into
// place, so test processes that build at the same time (go test runs
// packages in parallel) never see a half-written binary.
package nsqbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// apps are the commands built, by their import paths.
var apps = []string{"github.com/nsqio/nsq/apps/nsqd", "github.com/nsqio/nsq/apps/nsqlookupd", "github.com/nsqio/nsq/apps/nsqadmin"}

// unusedFor is how long a cached build may go unused before a later Build
// removes it (an older toolchain's, say).
const unusedFor = 7 * 24 * time.Hour

// Build returns the paths of nsqd and nsqlookupd built from the tools
// module in toolsDir, building them only if the cache has no build for the
// current toolchain, environment and toolsDir's go.mod and go.sum.
func Build(toolsDir string) (nsqd, nsqlookupd string, err error) {
	dir, err := buildAll(toolsDir)
	if err != nil {
		return "", "", err
	}
	return filepath.Join(dir, exe("nsqd")), filepath.Join(dir, exe("nsqlookupd")), nil
}

// Nsqadmin returns the path of nsqadmin built from the tools module in
// toolsDir, as Build does nsqd's (the three are built and cached together).
// nsqadmin v1.3.0 embeds its web UI, so the binary serves it on its own.
func Nsqadmin(toolsDir string) (string, error) {
	dir, err := buildAll(toolsDir)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, exe("nsqadmin")), nil
}

// buildAll returns the cache directory holding every one of apps, built
// if it was not.
func buildAll(toolsDir string) (string, error) {
	key, err := cacheKey(toolsDir)
	if err != nil {
		return "", err
	}
	root, err := os.UserCacheDir()
	if err != nil {
		root = os.TempDir()
	}
	root = filepath.Join(root, "spillq-test")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	final := filepath.Join(root, "nsq-"+key)
	if !complete(bins(final)...) {
		if err := build(toolsDir, root, final); err != nil {
			return "", err
		}
	}
	now := time.Now()
	os.Chtimes(final, now, now) // in use: not to be pruned
	prune(root, final, now)
	return final, nil
}

// bins are the paths of the binaries of apps in dir.
func bins(dir string) []string {
	var out []string
	for _, a := range apps {
		out = append(out, filepath.Join(dir, exe(filepath.Base(a))))
	}
	return out
}

// build builds into a temporary directory under root and renames it to
// final; if another process got there first, its build is used.
func build(toolsDir, root, final string) error {
	tmp, err := os.MkdirTemp(root, "tmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	cmd := exec.Command("go", append([]string{"build", "-o", tmp + string(filepath.Separator)}, apps...)...)
	cmd.Dir = toolsDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s in %s: %w\n%s", strings.Join(apps, ", "), toolsDir, err, out)
	}
	if !complete(bins(tmp)...) {
		return fmt.Errorf("go build in %s did not write %s", toolsDir, strings.Join(apps, ", "))
	}
	err = os.Rename(tmp, final)
	if err == nil || complete(bins(final)...) {
		return nil // ours, or a concurrent build's that won the rename
	}
	// An incomplete entry (files removed by hand): replace it.
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil && !complete(bins(final)...) {
		return err
	}
	return nil
}

// cacheKey hashes what the binaries depend on: the toolchain and build
// environment as the go command in toolsDir sees them, and the tools
// module's go.mod and go.sum.
func cacheKey(toolsDir string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(toolsDir, f))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	cmd := exec.Command("go", "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "CGO_ENABLED", "GOEXPERIMENT",
		"GOAMD64", "GOARM64", "GOARM", "GO386", "GOROOT", "CC")
	cmd.Dir = toolsDir
	env, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("go env in %s: %w", toolsDir, err)
	}
	h.Write(env)
	fmt.Fprintln(h, strings.Join(apps, " "))
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// prune removes cached builds other than keep that went unused for
// unusedFor, and temporary directories of builds that died as long ago.
// Errors are ignored: another process may be pruning too.
func prune(root, keep string, now time.Time) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(root, e.Name())
		if path == keep || !e.IsDir() || !(strings.HasPrefix(e.Name(), "nsq-") || strings.HasPrefix(e.Name(), "tmp-")) {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > unusedFor {
			os.RemoveAll(path)
		}
	}
}

func complete(paths ...string) bool {
	for _, p := range paths {
		if info, err := os.Stat(p); err != nil || !info.Mode().IsRegular() {
			return false
		}
	}
	return true
}

func exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
}
