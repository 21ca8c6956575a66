/* SPDX-License-Identifier: Apache-2.0 */
/* Just enough JSON writing for the conformance reader: strings escaped
 * per RFC 8259 (UTF-8 passed through), doubles that parse back exactly. */
#ifndef TOPDECK_CONFORMANCE_JSON_H
#define TOPDECK_CONFORMANCE_JSON_H

#include <math.h>
#include <stdio.h>

static void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", out); break;
		case '\\': fputs("\\\\", out); break;
		case '\n': fputs("\\n", out); break;
		case '\r': fputs("\\r", out); break;
		case '\t': fputs("\\t", out); break;
		case '\b': fputs("\\b", out); break;
		case '\f': fputs("\\f", out); break;
		default:
			if (*p < 0x20)
				fprintf(out, "\\u%04x", *p);
			else
				fputc(*p, out);
		}
	}
	fputc('"', out);
}

/* %.17g round-trips every finite double; JSON has no inf or NaN, which
 * a registry cannot hold in these fields anyway: they print as null. */
static void json_double(FILE *out, double v)
{
	if (isfinite(v))
		fprintf(out, "%.17g", v);
	else
		fputs("null", out);
}

#endif
