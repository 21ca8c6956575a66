// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;

/**
 * A floating-point gauge: one word in the shared area holding the double's bits; {@code add} is
 * a compare-and-swap loop.
 *
 * <pre>{@code
 * DoubleGauge temperature = registry.gaugeDouble("temperature_celsius", "Temperature.", "room", "a");
 * temperature.set(21.5);
 * }</pre>
 */
public final class DoubleGauge extends SharedWord {
    DoubleGauge(Registry r, int valueOffset) {
        super(r, valueOffset);
    }

    public void set(double v) {
        LONG.setOpaque(buf, at, Double.doubleToRawLongBits(v));
    }

    public void add(double d) {
        long old;
        do {
            old = (long) LONG.getVolatile(buf, at);
        } while (!LONG.compareAndSet(buf, at, old, Double.doubleToRawLongBits(Double.longBitsToDouble(old) + d)));
    }

    public double get() {
        return Double.longBitsToDouble((long) LONG.getOpaque(buf, at));
    }
}
