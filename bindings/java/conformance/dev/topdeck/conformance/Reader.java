// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.conformance;

import dev.topdeck.read.HistogramValue;
import dev.topdeck.read.Listing;
import dev.topdeck.read.Metric;
import dev.topdeck.read.RegistryFile;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/** Reader driver of conformance/PROTOCOL.md: {@code reader.sh <dir>} prints the canonical JSON. */
public final class Reader {
    private Reader() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: reader.sh <dir>");
            System.exit(2);
        }
        Path dir = Path.of(args[0]);
        if (!java.nio.file.Files.isDirectory(dir) || !java.nio.file.Files.isReadable(dir)) {
            System.err.println("error: " + dir + ": not a directory this user can read");
            System.exit(1);
        }
        Listing found;
        try {
            found = Listing.of(dir);
        } catch (Exception e) {
            System.err.println("error: " + dir + ": " + e.getMessage());
            System.exit(1);
            return;
        }
        for (Listing.Problem p : found.errors()) {
            if (p.path().equals(dir)) {
                System.err.println("error: " + dir + ": " + p.message());
                System.exit(1);
            }
        }
        var out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        out.println(json(found));
        out.flush();
    }

    static String json(Listing found) {
        var j = new StringBuilder("{\"registries\": [");
        List<RegistryFile> regs = new ArrayList<>(found.registries());
        regs.sort(Comparator.comparing(r -> r.path().getFileName().toString()));
        for (int i = 0; i < regs.size(); i++) {
            RegistryFile r = regs.get(i);
            j.append(i > 0 ? ", " : "").append("{\"file\": ").append(str(r.path().getFileName().toString()))
                    .append(", \"registry\": ").append(str(r.registry())).append(", \"state\": ").append(str(r.state()))
                    .append(", \"metrics\": [");
            for (int k = 0; k < r.metrics().size(); k++) {
                Metric m = r.metrics().get(k);
                j.append(k > 0 ? ", " : "").append("{\"kind\": ").append(str(m.kind())).append(", \"name\": ")
                        .append(str(m.name())).append(", \"labels\": [");
                for (int l = 0; l < m.labels().size(); l++) {
                    j.append(l > 0 ? ", " : "").append('[').append(str(m.labels().get(l).key())).append(", ")
                            .append(str(m.labels().get(l).value())).append(']');
                }
                j.append("], \"help\": ").append(str(m.help())).append(", \"unit\": ").append(str(m.unit()))
                        .append(", \"value\": ").append(value(m)).append('}');
            }
            j.append("]}");
        }
        j.append("], \"rejected\": [");
        List<String> rejected = new ArrayList<>();
        found.errors().forEach(p -> rejected.add(p.path().getFileName().toString()));
        rejected.sort(null);
        for (int i = 0; i < rejected.size(); i++) {
            j.append(i > 0 ? ", " : "").append(str(rejected.get(i)));
        }
        return j.append("]}").toString();
    }

    private static String value(Metric m) {
        if (m.value() instanceof HistogramValue h) {
            long[] c = h.counts();
            int first = 0, last = c.length - 1;
            while (first < c.length && c[first] == 0) {
                first++;
            }
            while (last >= first && c[last] == 0) {
                last--;
            }
            var b = new StringBuilder();
            for (int k = first; k <= last; k++) {
                b.append(k > first ? ", " : "").append(Long.toUnsignedString(c[k]));
            }
            int minIndex = first < c.length ? h.minIndex() + first : h.minIndex();
            return "{\"schema\": " + h.schema() + ", \"zero_threshold\": " + num(h.zeroThreshold()) + ", \"zero_count\": "
                    + Long.toUnsignedString(h.zeroCount()) + ", \"min_index\": " + minIndex + ", \"buckets\": [" + b
                    + "], \"count\": " + Long.toUnsignedString(h.count()) + ", \"sum\": " + num(h.sum()) + ", \"max\": "
                    + (Double.isNaN(h.max()) ? "null" : num(h.max())) + "}";
        }
        if (m.value() instanceof Double d) {
            return num(d);
        }
        long v = (Long) m.value();
        return m.kind().equals("counter") ? Long.toUnsignedString(v) : Long.toString(v);
    }

    /** Shortest round-trip text, as JSON allows it. */
    private static String num(double d) {
        if (Double.isNaN(d) || Double.isInfinite(d)) {
            return "null";
        }
        return Double.toString(d);
    }

    static String str(String s) {
        var b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }
}
