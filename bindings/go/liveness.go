// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// State probes the writer's lock (docs/FORMAT.md section 1, liveness):
// a shared lock that succeeds means the writer is gone; one that would
// block means someone holds the exclusive lock, the writer for a file only
// its owner can open, else whoever /proc/locks says.
func (f *File) State() State {
	err := unix.Flock(f.fd, unix.LOCK_SH|unix.LOCK_NB)
	if err == nil {
		unix.Flock(f.fd, unix.LOCK_UN)
		return Dead
	}
	if f.h.mode&0o077 == 0 {
		return Alive
	}
	if lockedByWriter(&f.st, f.h.pid, f.h.start) {
		return Alive
	}
	return Dead
}

// lockedByWriter looks for a FLOCK WRITE lock on the file held by a
// process of the file's owner, by the process the header names, or by a
// pid this reader cannot see (0: another pid namespace).
func lockedByWriter(st *unix.Stat_t, pid uint32, start uint64) bool {
	fh, err := os.Open("/proc/locks")
	if err != nil {
		return true // cannot tell: never call a live file dead
	}
	defer fh.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		// "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF", or with "->" after the id.
		if len(w) > 1 && w[1] == "->" {
			w = append(w[:1], w[2:]...)
		}
		if len(w) < 6 || w[1] != "FLOCK" || w[3] != "WRITE" || w[5] != want {
			continue
		}
		holder, err := strconv.ParseUint(w[4], 10, 32)
		if err != nil {
			continue
		}
		if holder == 0 || uidOf(holder) == int64(st.Uid) {
			return true
		}
		if uint32(holder) == pid {
			if s, err := startOf(holder); err == nil && s == start {
				return true
			}
		}
	}
	return false
}

func uidOf(pid uint64) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			n, err := strconv.ParseInt(f[2], 10, 64) // effective uid
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func startOf(pid uint64) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("bad stat")
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return 0, fmt.Errorf("bad stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
