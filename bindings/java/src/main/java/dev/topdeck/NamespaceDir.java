// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.GroupPrincipal;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.Map;

/**
 * The writer's namespace directory (docs/FORMAT.md section 1): opened once without following
 * links, checked through its descriptor, and every later operation relative to that descriptor.
 * Java's file API reaches "the file behind descriptor N" as {@code /proc/self/fd/N}, whose stat
 * and chmod follow the descriptor, not a path someone could swap.
 */
final class NamespaceDir {
    static final String ENV_DIR = "TOPDECK_DIR";
    static final String ENV_GROUP = "TOPDECK_GROUP";
    private static final String SHM_ROOT = "/dev/shm";
    private static final int ELOOP = 40, ENOTDIR = 20;

    final int fd;
    final Path path;

    private NamespaceDir(int fd, Path path) {
        this.fd = fd;
        this.path = path;
    }

    /** The file behind descriptor {@code fd}, for Java's file API. */
    static Path byFd(int fd) {
        return Path.of("/proc/self/fd", Integer.toString(fd));
    }

    static int euid() throws IOException {
        return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
    }

    /** The directory is a symlink, someone else's, or writable by others. */
    static final class UnsafeDirectory extends IOException {
        UnsafeDirectory(Path path, String why) {
            super(path + ": unsafe namespace directory: " + why + ". topdeck uses only directories that are "
                    + "not symlinks, belong to their user and are writable by nobody else, and touched nothing in it: "
                    + "find out who made it (`ls -ld " + path + "`) before changing it, or point " + ENV_DIR
                    + " at a directory of your own");
        }
    }

    /**
     * Opens (creating if needed) the directory to publish in: {@code explicit}, else
     * {@code TOPDECK_DIR}, else {@code /dev/shm/topdeck-<euid>}, or a private fallback
     * {@code /dev/shm/topdeck-<euid>.<tag>} when someone else squats the default (said on stderr).
     */
    static NamespaceDir prepare(Path explicit, String group) throws IOException {
        int uid = euid();
        Path path = explicit;
        if (path == null) {
            String env = System.getenv(ENV_DIR);
            path = env == null || env.isEmpty() ? null : Path.of(env);
        }
        NamespaceDir dir;
        if (path != null) {
            dir = createAndOpen(path, uid);
        } else {
            path = Path.of(SHM_ROOT, "topdeck-" + uid);
            try {
                dir = createAndOpen(path, uid);
            } catch (UnsafeDirectory e) {
                dir = fallback(uid);
                System.err.println("topdeck: " + e.getMessage() + "; publishing in " + dir.path
                        + " instead, where topdeck's readers look too");
            }
        }
        try {
            setSharing(dir, group);
        } catch (IOException | RuntimeException e) {
            Native.close(dir.fd);
            throw e;
        }
        return dir;
    }

    private static NamespaceDir createAndOpen(Path path, int uid) throws IOException {
        try {
            Files.createDirectory(path, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        } catch (FileAlreadyExistsException e) {
            // checked below, through the descriptor
        } catch (IOException e) {
            throw new IOException(path + ": cannot create the namespace directory (" + e + "); create it, or point "
                    + ENV_DIR + " at a directory you own", e);
        }
        return openChecked(path, uid);
    }

    private static NamespaceDir openChecked(Path path, int uid) throws IOException {
        int fd = Native.openDir(path.toString());
        if (fd == -ELOOP || fd == -ENOTDIR) {
            throw new UnsafeDirectory(path, "it is a symlink or not a directory");
        }
        if (fd < 0) {
            throw new IOException(path + ": cannot open the namespace directory: " + Native.strerror(-fd));
        }
        try {
            Map<String, Object> st = Files.readAttributes(byFd(fd), "unix:uid,mode");
            int owner = (Integer) st.get("uid");
            int mode = (Integer) st.get("mode");
            if (owner != uid) {
                throw new UnsafeDirectory(path, "owned by uid " + owner + ", expected uid " + uid);
            }
            if ((mode & 0022) != 0) {
                throw new UnsafeDirectory(path, "mode " + Integer.toOctalString(mode & 07777) + " lets others write in it");
            }
        } catch (IOException | RuntimeException e) {
            Native.close(fd);
            throw e;
        }
        return new NamespaceDir(fd, path);
    }

    private static NamespaceDir fallback(int uid) throws IOException {
        String prefix = "topdeck-" + uid + ".";
        try (var names = Files.list(Path.of(SHM_ROOT))) {
            for (Path p : names.sorted().toList()) {
                String tag = p.getFileName().toString();
                if (tag.startsWith(prefix) && tag.substring(prefix.length()).matches("[A-Za-z0-9]+")) {
                    try {
                        return openChecked(p, uid);
                    } catch (IOException e) {
                        // not ours or not safe: try the next one
                    }
                }
            }
        }
        var random = new SecureRandom();
        for (int i = 0; i < 16; i++) {
            Path p = Path.of(SHM_ROOT, prefix + Long.toHexString(random.nextLong() & 0xffffffffffffL));
            try {
                Files.createDirectory(p, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            } catch (FileAlreadyExistsException e) {
                continue;
            }
            return openChecked(p, uid);
        }
        throw new IOException("cannot create a fallback namespace directory under " + SHM_ROOT);
    }

    private static void setSharing(NamespaceDir dir, String group) throws IOException {
        Path p = byFd(dir.fd);
        if (group != null) {
            setGroup(p, group);
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwxr-x---"));
        } else {
            Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rwx------"));
        }
    }

    /** Gives {@code p} to the readers' group, a group name or a gid. */
    static void setGroup(Path p, String group) throws IOException {
        if (group.chars().allMatch(Character::isDigit)) {
            Files.setAttribute(p, "unix:gid", Integer.parseInt(group));
            return;
        }
        GroupPrincipal g;
        try {
            g = p.getFileSystem().getUserPrincipalLookupService().lookupPrincipalByGroupName(group);
        } catch (IOException e) {
            throw new IOException(ENV_GROUP + "=" + group + ": no such group; give a group name from /etc/group or a gid", e);
        }
        Files.setAttribute(p, "posix:group", g);
    }
}
