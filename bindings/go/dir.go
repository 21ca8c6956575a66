// SPDX-License-Identifier: Apache-2.0

package topdeck

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The writer's namespace directory (docs/FORMAT.md section 1,
// docs/SECURITY.md): opened once without following links, checked through
// its descriptor, and every later operation relative to that descriptor.

const (
	envDir      = "TOPDECK_DIR"
	envGroup    = "TOPDECK_GROUP"
	shmRoot     = "/dev/shm"
	privateDir  = 0o700
	groupDir    = 0o750
	privateFile = 0o600
	groupFile   = 0o640
)

// errUnsafeDir: a symlink, someone else's directory, or one others may write in.
type errUnsafeDir struct{ path, why string }

func (e *errUnsafeDir) Error() string {
	return fmt.Sprintf("%s: unsafe namespace directory: %s. topdeck uses only directories that are not symlinks, belong to their user and are writable by nobody else, and touched nothing in it: find out who made it (`ls -ld %s`) before changing it, or point %s at a directory of your own", e.path, e.why, e.path, envDir)
}

// envGroupID is the gid TOPDECK_GROUP names (a group name or a gid), or -1.
func envGroupID() (int, error) {
	g := os.Getenv(envGroup)
	if g == "" {
		return -1, nil
	}
	return lookupGroup(g)
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil && n >= 0 {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return -1, fmt.Errorf("topdeck: group %q: no such group; give a group name from /etc/group or a gid", g)
	}
	return strconv.Atoi(gr.Gid)
}

// openDirChecked opens path as a directory without following a symlink and
// checks, through the descriptor, its owner (owner < 0: anyone) and mode.
func openDirChecked(path string, owner int) (int, uint32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, 0, &errUnsafeDir{path, "it is a symlink or not a directory"}
		}
		return -1, 0, fmt.Errorf("%s: cannot open the namespace directory: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, fmt.Errorf("%s: %w", path, err)
	}
	why := ""
	if owner >= 0 && int(st.Uid) != owner {
		why = fmt.Sprintf("owned by uid %d, expected uid %d", st.Uid, owner)
	} else if st.Mode&0o022 != 0 {
		why = fmt.Sprintf("mode %o lets others write in it", st.Mode&0o7777)
	}
	if why != "" {
		unix.Close(fd)
		return -1, 0, &errUnsafeDir{path, why}
	}
	return fd, st.Uid, nil
}

func createAndOpen(path string, owner int) (int, error) {
	if err := unix.Mkdir(path, privateDir); err != nil && err != unix.EEXIST {
		return -1, fmt.Errorf("%s: cannot create the namespace directory (%v); create it, or point %s at a directory you own", path, err, envDir)
	}
	fd, _, err := openDirChecked(path, owner)
	return fd, err
}

// prepareDir opens (creating if needed) the directory a writer publishes
// in: explicit, else TOPDECK_DIR, else /dev/shm/topdeck-<euid>, or a
// private fallback /dev/shm/topdeck-<euid>.<tag> when someone else squats
// the default (said on stderr).
func prepareDir(explicit string, group int) (int, string, error) {
	uid := os.Geteuid()
	path := explicit
	if path == "" {
		path = os.Getenv(envDir)
	}
	var fd int
	var err error
	if path != "" {
		owner := -1
		if namedUID(path) >= 0 {
			owner = uid
		}
		if fd, err = createAndOpen(path, owner); err != nil {
			return -1, "", err
		}
	} else {
		path = fmt.Sprintf("%s/topdeck-%d", shmRoot, uid)
		fd, err = createAndOpen(path, uid)
		var unsafeDir *errUnsafeDir
		if errors.As(err, &unsafeDir) {
			fd, path, err = fallbackDir(uid)
			if err == nil {
				fmt.Fprintf(os.Stderr, "topdeck: %v; publishing in %s instead, where topdeck's readers look too\n", unsafeDir, path)
			}
		}
		if err != nil {
			return -1, "", err
		}
	}
	if err := setSharing(fd, group); err != nil {
		unix.Close(fd)
		return -1, "", fmt.Errorf("%s: cannot set the directory's mode or group: %w", path, err)
	}
	return fd, path, nil
}

func setSharing(fd, group int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	want := uint32(privateDir)
	if group >= 0 {
		want = groupDir
		if int(st.Gid) != group {
			if err := unix.Fchown(fd, -1, group); err != nil {
				return err
			}
		}
	}
	if st.Mode&0o7777 != want {
		return unix.Fchmod(fd, want)
	}
	return nil
}

// namedUID is the uid /dev/shm/topdeck-<uid>[.<tag>] carries, else -1.
func namedUID(path string) int {
	abs, err := filepath.Abs(path)
	if err != nil {
		return -1
	}
	parent, name := filepath.Split(abs)
	if filepath.Clean(parent) != shmRoot || !strings.HasPrefix(name, "topdeck-") {
		return -1
	}
	id, tag, dotted := strings.Cut(name[len("topdeck-"):], ".")
	if dotted && (tag == "" || !isAlnum(tag)) {
		return -1
	}
	n, err := strconv.Atoi(id)
	if err != nil || n < 0 || !isDigits(id) {
		return -1
	}
	return n
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func isAlnum(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func fallbackDir(uid int) (int, string, error) {
	entries, _ := os.ReadDir(shmRoot)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	prefix := fmt.Sprintf("topdeck-%d.", uid)
	for _, n := range names {
		p := shmRoot + "/" + n
		if strings.HasPrefix(n, prefix) && namedUID(p) == uid {
			if fd, _, err := openDirChecked(p, uid); err == nil {
				return fd, p, nil
			}
		}
	}
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	for range 16 {
		var tag [12]byte
		rand.Read(tag[:])
		for i := range tag {
			tag[i] = letters[int(tag[i])%len(letters)]
		}
		p := fmt.Sprintf("%s/topdeck-%d.%s", shmRoot, uid, tag[:])
		if err := unix.Mkdir(p, privateDir); err == unix.EEXIST {
			continue
		} else if err != nil {
			return -1, "", fmt.Errorf("%s: cannot create a fallback namespace directory: %w", p, err)
		}
		fd, _, err := openDirChecked(p, uid)
		return fd, p, err
	}
	return -1, "", fmt.Errorf("cannot create a fallback namespace directory under %s", shmRoot)
}

// renameNoReplace publishes old as new without replacing anything:
// renameat2(RENAME_NOREPLACE), else (a file system without it) a hard
// link, which never replaces either, and an unlink of the old name.
func renameNoReplace(dfd int, old, new string) error {
	err := unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS {
		if err = unix.Linkat(dfd, old, dfd, new, 0); err == nil {
			err = unix.Unlinkat(dfd, old, 0)
		}
	}
	return err
}
