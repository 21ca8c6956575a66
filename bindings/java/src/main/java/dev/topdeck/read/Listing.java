// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

import dev.topdeck.format.Format;
import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.attribute.BasicFileAttributeView;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What one listing of a namespace found (docs/FORMAT.md section 1): the registries it read, the
 * files or directories it could not read, each with why, and how many directories it was not
 * allowed to open (other users' private ones: not errors). Works on JDK 17.
 *
 * <pre>{@code
 * Listing found = Listing.of(null);   // TOPDECK_DIR, else every /dev/shm/topdeck-<uid>[.<tag>]
 * for (RegistryFile r : found.registries()) {
 *     System.out.println(r.path() + " " + r.state() + " " + r.metrics().size() + " metrics");
 * }
 * }</pre>
 */
public record Listing(List<RegistryFile> registries, List<Problem> errors, int privateDirs) {
    private static final int MAX_FILES = 4096;

    /** A file or directory that could not be read, and why. */
    public record Problem(Path path, String message) {}

    /** Lists and reads every registry of {@code dir}, else of TOPDECK_DIR, else of every /dev/shm/topdeck-*. */
    public static Listing of(Path dir) throws IOException {
        List<RegistryFile> found = new ArrayList<>();
        List<Problem> errors = new ArrayList<>();
        int privateDirs = 0;
        for (Path d : namespaceDirs(dir)) {
            try (Opened o = openDir(d)) {
                List<String> names = new ArrayList<>();
                for (Path e : o.stream) {
                    String n = e.getFileName().toString();
                    if (n.endsWith(Format.SUFFIX) && !n.startsWith(".")) {
                        names.add(n);
                    }
                }
                names.sort(null);
                for (String n : names.subList(0, Math.min(names.size(), MAX_FILES))) {
                    try {
                        found.add(RegistryFile.read(o.stream, d, n, o.owner));
                    } catch (BadFileException | IOException | RuntimeException e) {
                        errors.add(new Problem(d.resolve(n), e.getMessage()));
                    }
                }
            } catch (java.nio.file.AccessDeniedException e) {
                // Another user's private directory: skipped and counted, not an error (section 1).
                privateDirs++;
            } catch (BadFileException | IOException e) {
                errors.add(new Problem(d, e.getMessage()));
            }
        }
        return new Listing(found, errors, privateDirs);
    }

    /** Section 1: {@code explicit}, else TOPDECK_DIR, else every /dev/shm/topdeck-<uid>[.<tag>]. */
    public static List<Path> namespaceDirs(Path explicit) throws IOException {
        if (explicit != null) {
            return List.of(explicit);
        }
        String env = System.getenv("TOPDECK_DIR");
        if (env != null && !env.isEmpty()) {
            return List.of(Path.of(env));
        }
        try (var entries = Files.list(Path.of("/dev/shm"))) {
            return entries.filter(p -> expectedOwner(p) >= 0).sorted().toList();
        }
    }

    /** The uid a /dev/shm/topdeck-<uid>[.<tag>] name carries, else -1. */
    static int expectedOwner(Path p) {
        Path abs = p.toAbsolutePath();
        String name = abs.getFileName() == null ? "" : abs.getFileName().toString();
        if (!"/dev/shm".equals(String.valueOf(abs.getParent())) || !name.matches("topdeck-[0-9]{1,9}(\\.[A-Za-z0-9]+)?")) {
            return -1;
        }
        return Integer.parseInt(name.substring(8).split("\\.")[0]);
    }

    /** An open namespace directory and its owner. */
    record Opened(SecureDirectoryStream<Path> stream, int owner) implements AutoCloseable {
        @Override
        public void close() throws IOException {
            stream.close();
        }
    }

    /**
     * Opens a directory and checks it through the open descriptor (fstat): the path is checked
     * without following links first, and must still be the same directory once opened.
     */
    static Opened openDir(Path d) throws IOException, BadFileException {
        Map<String, Object> st = Files.readAttributes(d, "unix:uid,mode,ino,dev", LinkOption.NOFOLLOW_LINKS);
        int mode = (Integer) st.get("mode");
        if ((mode & 0170000) != 0040000) {
            throw new BadFileException(d + ": not a directory (symlinks are not followed)");
        }
        DirectoryStream<Path> ds = Files.newDirectoryStream(d);
        if (!(ds instanceof SecureDirectoryStream<Path> sds)) {
            ds.close();
            throw new IOException(d + ": this platform cannot open files relative to a directory");
        }
        try {
            var key = sds.getFileAttributeView(BasicFileAttributeView.class).readAttributes().fileKey();
            var before = Files.readAttributes(d, java.nio.file.attribute.BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS).fileKey();
            int owner = (Integer) st.get("uid");
            int expected = expectedOwner(d);
            String why = null;
            if (key == null || !key.equals(before)) {
                why = "replaced while being opened";
            } else if (expected >= 0 && owner != expected) {
                why = "owned by uid " + owner + ", expected uid " + expected;
            } else if ((mode & 0022) != 0) {
                why = "writable by group or others";
            }
            if (why != null) {
                throw new BadFileException(d + ": unsafe namespace directory: " + why);
            }
            return new Opened(sds, owner);
        } catch (IOException | BadFileException | RuntimeException e) {
            sds.close();
            throw e;
        }
    }
}
