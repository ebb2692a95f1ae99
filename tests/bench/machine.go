package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core"
)

// machine identifies where the figures were measured: a ratio is only
// meaningful between figures taken on the same machine and disk, and a
// figure from another machine only with its description.
type machine struct {
	CPUModel      string `json:"cpu_model"`
	Cores         int    `json:"cores"`
	Kernel        string `json:"kernel"`
	Hostname      string `json:"hostname"`
	BenchDir      string `json:"bench_dir"`
	FSType        string `json:"fs_type"`
	FSMagic       string `json:"fs_magic"`
	DBPath        string `json:"db_path"`
	DBDepth       int    `json:"db_path_components_below_bench_dir"`
	GoVersion     string `json:"go_version"`
	PythonVersion string `json:"python_version"`
	Engine        string `json:"engine_version"`
	GitCommit     string `json:"git_commit"`
	Date          string `json:"date"`
}

// fsNames maps statfs f_type magic numbers (linux/magic.h and the
// filesystems' own headers) to names.
var fsNames = map[int64]string{
	0xEF53:     "ext2/3/4",
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x6969:     "nfs",
	0x0BD00BD0: "lustre",
	0x47504653: "gpfs",
	0x19830326: "beegfs",
	0x00C36400: "ceph",
	0x794C7630: "overlayfs",
	0x65735546: "fuse",
	0x2FC12FC1: "zfs",
	0x01021997: "9p",
	0xFF534D42: "cifs",
	0x5346414F: "afs",
	0x73717368: "squashfs",
	0x858458F6: "ramfs",
	0x6A656A63: "fakeowner",
}

func fsType(dir string) (name, magic string) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown (" + err.Error() + ")", ""
	}
	m := int64(st.Type) & 0xFFFFFFFF
	magic = fmt.Sprintf("0x%X", m)
	if n, ok := fsNames[m]; ok {
		return n, magic
	}
	return "unknown", magic
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func kernel() string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	str := func(b [65]int8) string {
		var s []byte
		for _, c := range b {
			if c == 0 {
				break
			}
			s = append(s, byte(c))
		}
		return string(s)
	}
	return str(u.Sysname) + " " + str(u.Release)
}

func pythonVersion(python string) string {
	out, err := exec.Command(python, "-c", "import platform; print(platform.python_version())").Output()
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

func gitCommit(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}

func describeMachine(cfg *config) machine {
	host, _ := os.Hostname()
	name, magic := fsType(cfg.Dir)
	return machine{
		CPUModel:      cpuModel(),
		Cores:         runtime.NumCPU(),
		Kernel:        kernel(),
		Hostname:      host,
		BenchDir:      cfg.Dir,
		FSType:        name,
		FSMagic:       magic,
		DBPath:        cfg.dbPath(),
		DBDepth:       len(dbSubdirs) + 1,
		GoVersion:     runtime.Version(),
		PythonVersion: pythonVersion(cfg.Python),
		Engine:        core.Version,
		GitCommit:     gitCommit(cfg.Repo),
		Date:          time.Now().UTC().Format(time.RFC3339),
	}
}
