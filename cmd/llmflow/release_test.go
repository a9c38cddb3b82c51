package main

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRelease runs scripts/release.sh and checks what a centre installs
// (opt-in: LLMFLOW_TEST_RELEASE=1; it cross-compiles twice, minutes on 2
// cores): the checksums; each tarball's files and a static binary of its
// architecture, the amd64 one run; the .deb's and .rpm's metadata, files
// and user-creating scripts, their unit verified by systemd-analyze; the
// OCI image unpacked with umoci and serve started from its root file
// system as its user, answering /healthz. The Apptainer definition is only
// checked for its bootstrap: Debian has no apptainer to build it with.
func TestRelease(t *testing.T) {
	if os.Getenv("LLMFLOW_TEST_RELEASE") != "1" {
		t.Skip("LLMFLOW_TEST_RELEASE=1 runs scripts/release.sh (minutes: two cross-compiled builds, nfpm, umoci)")
	}
	for _, tool := range []string{"umoci", "dpkg-deb", "rpm", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (apt-get install umoci rpm)", tool)
		}
	}
	const version = "v0.0.0-releasetest"
	out := t.TempDir()
	cmd := exec.Command("../../scripts/release.sh", version, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, b)
	}
	if b, err := exec.Command("sh", "-c", "cd "+out+" && sha256sum -c SHA256SUMS").CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, b)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	rpmArch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}
	for arch, machine := range machines {
		t.Run(arch, func(t *testing.T) {
			name := "llmflow_" + version + "_linux_" + arch
			for _, f := range []string{name + ".tar.gz", name + ".oci.tar", "llmflow_0.0.0~releasetest-1_" + arch + ".deb", "llmflow-0.0.0~releasetest-1." + rpmArch[arch] + ".rpm"} {
				if !strings.Contains(string(sums), "  "+f+"\n") {
					t.Errorf("SHA256SUMS lacks %s:\n%s", f, sums)
				}
			}
			// The tarball.
			dir := t.TempDir()
			files := untar(t, filepath.Join(out, name+".tar.gz"), dir)
			for _, want := range []string{"llmflow", "README.md", "LICENSE", "packaging/llmflow.service", "packaging/llmflow@.service",
				"examples/gateway.hcl", "dashboards/llmflow-grafana.json", "dashboards/llmflow-rules.yml"} {
				if !slices.Contains(files, name+"/"+want) {
					t.Errorf("%s.tar.gz lacks %s: %v", name, want, files)
				}
			}
			bin := filepath.Join(dir, name, "llmflow")
			checkStaticELF(t, bin, machine)
			if arch == "amd64" {
				if b, err := exec.Command(bin, "--version").Output(); err != nil || string(b) != "llmflow "+version+"\n" {
					t.Errorf("llmflow --version: %q, %v", b, err)
				}
			}
			// The .deb.
			deb := filepath.Join(out, "llmflow_0.0.0~releasetest-1_"+arch+".deb")
			info := runOut(t, "dpkg-deb", "-I", deb)
			for _, want := range []string{"Package: llmflow", "Version: 0.0.0~releasetest-1", "Architecture: " + arch, "preinst", "postinst", "prerm", "conffiles"} {
				if !strings.Contains(info, want) {
					t.Errorf(".deb info lacks %q:\n%s", want, info)
				}
			}
			contents := runOut(t, "dpkg-deb", "-c", deb)
			for _, want := range []string{"./usr/bin/llmflow", "./usr/lib/systemd/system/llmflow.service", "./etc/llmflow/gateway.hcl", "./usr/share/llmflow/dashboards/llmflow-rules.yml"} {
				if !strings.Contains(contents, want) {
					t.Errorf(".deb lacks %s:\n%s", want, contents)
				}
			}
			x := t.TempDir()
			runOut(t, "dpkg-deb", "-R", deb, x)
			if pre, _ := os.ReadFile(filepath.Join(x, "DEBIAN", "preinst")); !strings.Contains(string(pre), "useradd --system") {
				t.Errorf(".deb preinst does not create the llmflow user:\n%s", pre)
			}
			checkStaticELF(t, filepath.Join(x, "usr", "bin", "llmflow"), machine)
			verifyUnit(t, filepath.Join(x, "usr", "lib", "systemd", "system", "llmflow.service"), "/usr/bin/llmflow")
			// The .rpm.
			rpmFile := filepath.Join(out, "llmflow-0.0.0~releasetest-1."+rpmArch[arch]+".rpm")
			if q := runOut(t, "rpm", "-qp", "--queryformat", "%{NAME} %{VERSION} %{RELEASE} %{ARCH}", rpmFile); q != "llmflow 0.0.0~releasetest 1 "+rpmArch[arch] {
				t.Errorf("rpm -qp: %q", q)
			}
			if l := runOut(t, "rpm", "-qpl", rpmFile); !strings.Contains(l, "/usr/bin/llmflow\n") || !strings.Contains(l, "/usr/lib/systemd/system/llmflow.service") {
				t.Errorf("rpm -qpl:\n%s", l)
			}
			if s := runOut(t, "rpm", "-qp", "--scripts", rpmFile); !strings.Contains(s, "useradd --system") {
				t.Errorf("rpm scripts do not create the llmflow user:\n%s", s)
			}
			if c := runOut(t, "rpm", "-qpc", rpmFile); strings.TrimSpace(c) != "/etc/llmflow/gateway.hcl" {
				t.Errorf("rpm config files: %q", c)
			}
			// The OCI image.
			layout := t.TempDir()
			untar(t, filepath.Join(out, name+".oci.tar"), layout)
			bundle := filepath.Join(t.TempDir(), "bundle")
			runOut(t, "umoci", "unpack", "--image", layout+":"+version, bundle)
			var rt struct {
				Process struct {
					Args []string `json:"args"`
					User struct {
						UID int `json:"uid"`
					} `json:"user"`
				} `json:"process"`
			}
			b, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			if err := json.Unmarshal(b, &rt); err != nil {
				t.Fatal(err)
			}
			if want := []string{"/usr/bin/llmflow", "serve", "-c", "/etc/llmflow/gateway.hcl", "--listen", "0.0.0.0:8080"}; !slices.Equal(rt.Process.Args, want) || rt.Process.User.UID != 65532 {
				t.Errorf("image's process: %v as %d, want %v as 65532", rt.Process.Args, rt.Process.User.UID, want)
			}
			checkStaticELF(t, filepath.Join(bundle, "rootfs", "usr", "bin", "llmflow"), machine)
			if arch == "amd64" {
				serveFromRootfs(t, filepath.Join(bundle, "rootfs"))
				runInPodman(t, filepath.Join(out, name+".oci.tar"), version)
			}
		})
	}
	def, _ := os.ReadFile(filepath.Join(out, "llmflow.def"))
	if !strings.Contains(string(def), "Bootstrap: oci-archive\nFrom: llmflow_"+version+"_linux_amd64.oci.tar\n") {
		t.Errorf("llmflow.def:\n%s", def)
	}
}

// serveFromRootfs runs the image's llmflow serve in its root file system
// (chroot, as the image's user 65532) in front of a simulated vLLM of the
// test, and waits for /healthz to answer 200.
func serveFromRootfs(t *testing.T, rootfs string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Log("not root: the image's serve is not started (chroot needs root)")
		return
	}
	sim := startSim(t, time.Millisecond)
	etc := filepath.Join(rootfs, "etc", "llmflow")
	procConfig(t, etc, sim, "store {\n  path = \"/var/lib/llmflow/llmflow.db\"\n}\n")
	for _, f := range []string{"master.key", "vllm.key", "gateway.hcl"} {
		if err := os.Chown(filepath.Join(etc, f), 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	cmd := exec.Command("chroot", "--userspec=65532:65532", rootfs, "/usr/bin/llmflow", "serve", "-c", "/etc/llmflow/gateway.hcl", "--listen", addr)
	var logs syncBuf
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitExplained(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, func() string { return "the image's serve does not answer /healthz:\n" + logs.String() })
}

// runInPodman loads the OCI archive into a podman store of the test's own
// and runs the image's llmflow --version in a container, when podman and
// runc are installed (apt-get install podman runc): vfs storage, cgroupfs,
// the open-file limit this process has and 4096 processes (a container
// may not raise them; runc was refused setting this process's own).
func runInPodman(t *testing.T, archive, version string) {
	t.Helper()
	_, perr := exec.LookPath("podman")
	_, rerr := exec.LookPath("runc")
	if perr != nil || rerr != nil {
		t.Log("podman or runc not installed: the image is not run in a container")
		return
	}
	// Not t.TempDir: podman's storage may still be written to as the
	// test ends, and its removal is best effort.
	dir, err := os.MkdirTemp("", "llmflow-podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var nofile syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile)
	podman := func(args ...string) string {
		t.Helper()
		base := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs",
			"--cgroup-manager", "cgroupfs", "--events-backend", "none", "--runtime", "runc"}
		return runOut(t, "podman", append(base, args...)...)
	}
	loaded := podman("load", "-q", "-i", archive)
	ref := strings.TrimSpace(loaded[strings.LastIndex(loaded, ":")+1:])
	if i := strings.Index(loaded, "Loaded image:"); i >= 0 {
		ref = strings.TrimSpace(loaded[i+len("Loaded image:"):])
	}
	t.Cleanup(func() { podman("rm", "-a", "-f"); podman("rmi", "-a", "-f") })
	limits := []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Cur), "--ulimit", "nproc=4096:4096"}
	if got := podman(append(append([]string{"run", "--rm", "--network", "none"}, limits...), ref, "--version")...); got != "llmflow "+version+"\n" {
		t.Errorf("podman run %s --version: %q", ref, got)
	}
}

// untar extracts a tar (gzip-compressed when the name ends in .gz) into
// dir and returns the names of its regular files.
func untar(t *testing.T, path, dir string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = gz
	}
	tr := tar.NewReader(r)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			names = append(names, strings.TrimPrefix(filepath.Clean(h.Name), "./"))
			os.MkdirAll(filepath.Dir(p), 0o755)
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			w.Close()
		}
	}
}

// checkStaticELF: path is an executable of the machine with no dynamic
// loader (CGO_ENABLED=0).
func checkStaticELF(t *testing.T, path string, m elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	if f.Machine != m {
		t.Errorf("%s: machine %v, want %v", path, f.Machine, m)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked (PT_INTERP)", path)
		}
	}
}

// verifyUnit runs systemd-analyze verify on a packaged unit, its binary
// path (bin) pointed at this test's executable.
func verifyUnit(t *testing.T, unit, bin string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the packaged unit is not verified")
		return
	}
	exe, _ := os.Executable()
	src, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "ExecStart="+bin+" serve") {
		t.Errorf("%s does not start %s serve", unit, bin)
	}
	p := filepath.Join(t.TempDir(), filepath.Base(unit))
	os.WriteFile(p, []byte(strings.ReplaceAll(string(src), bin, exe)), 0o644)
	if b, err := exec.Command(sa, "verify", p).CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, b)
	}
}

// runOut runs a command and returns its standard output; a failure fails the
// test.
func runOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return string(b)
}
