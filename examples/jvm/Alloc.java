// SPDX-License-Identifier: Apache-2.0
// A JVM for topdeck's demo and tests to look at: it allocates (so its
// young collector runs and its hsperfdata counters move), prints "quiet"
// once it has done `iterations` rounds, then sleeps until killed. With
// `forever` it keeps allocating at a few MB/s instead, for views that show
// rates.
//
//   javac -d out examples/jvm/Alloc.java && java -Xmx64m -cp out Alloc 20000
public class Alloc {
    public static void main(String[] args) throws Exception {
        boolean forever = args.length > 0 && args[0].equals("forever");
        int iterations = forever ? Integer.MAX_VALUE : Integer.parseInt(args[0]);
        java.util.List<byte[]> kept = new java.util.ArrayList<>();
        for (int i = 0; i < iterations; i++) {
            byte[] chunk = new byte[64 * 1024];
            if (i % 64 == 0) {
                kept.add(chunk);
                if (kept.size() > 16) kept.clear();
            }
            if (i == 2000 && forever) {
                System.out.println("allocating");
                System.out.flush();
            }
            if (i % 2000 == 0) Thread.sleep(forever ? 20 : 1);
        }
        System.out.println("quiet " + kept.size());
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
