// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

import dev.topdeck.format.Format;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;

/**
 * Whether a file's writer lives (docs/FORMAT.md section 1), asked of {@code /proc/locks} alone:
 * this reader takes no lock at all, so it runs on JDK 17 (no {@code flock(2)} there) and can
 * never hold up a writer or a collector.
 *
 * <p>It answers as the format's shared probe would: a private file ({@code mode & 0077 == 0}),
 * which only its owner can open, is alive while anyone holds a {@code FLOCK WRITE} lock on its
 * device and inode; a file others may open is alive only if that lock is held by a process of the
 * file's owner, by the process the header names (same pid and start time), or by a pid this reader
 * cannot see (0). An unreadable table counts as alive: calling a live file dead would let a
 * collector remove it.
 */
final class Liveness {
    private Liveness() {}

    static boolean alive(long dev, long ino, int mode, int ownerUid, long pid, long startTicks) {
        String table;
        try {
            table = Files.readString(Path.of("/proc/locks"));
        } catch (IOException e) {
            return true;
        }
        long major = ((dev >>> 8) & 0xfff) | ((dev >>> 32) & ~0xfffL);
        long minor = (dev & 0xff) | ((dev >>> 12) & ~0xffL);
        for (String line : table.split("\n")) {
            // "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF"; "->" lines are waiters, not holders.
            String[] f = line.trim().split("\\s+");
            if (f.length < 6 || f[1].equals("->") || !f[1].equals("FLOCK") || !f[3].equals("WRITE")) {
                continue;
            }
            String[] id = f[5].split(":");
            try {
                if (id.length != 3 || Long.parseLong(id[0], 16) != major || Long.parseLong(id[1], 16) != minor
                        || Long.parseLong(id[2]) != ino) {
                    continue;
                }
                if ((mode & 0077) == 0) {
                    return true;
                }
                long holder = Long.parseLong(f[4]);
                if (holder <= 0) {
                    return true;
                }
                int uid;
                try {
                    uid = (Integer) Files.getAttribute(Path.of("/proc", f[4]), "unix:uid", LinkOption.NOFOLLOW_LINKS);
                } catch (IOException e) {
                    return true;
                }
                if (uid == ownerUid || (holder == pid && Format.startTicks(f[4]) == startTicks)) {
                    return true;
                }
            } catch (NumberFormatException e) {
                // not a line this reader understands
            }
        }
        return false;
    }
}
