// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

/** A file that breaks the format (or was planted); the message says how. */
public final class BadFileException extends Exception {
    public BadFileException(String message) {
        super(message);
    }
}
