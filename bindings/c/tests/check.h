/* SPDX-License-Identifier: Apache-2.0 */
/* A minimal test harness: CHECK records a failure and goes on; main
 * prints "N passed, N failed" and exits non-zero on any failure. */
#ifndef TOPDECK_CHECK_H
#define TOPDECK_CHECK_H

#include <stdio.h>

static int check_failures;
static int check_current_failed;

#define CHECK(cond)                                                                  \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
				#cond);                                              \
			check_failures++;                                            \
			check_current_failed = 1;                                    \
		}                                                                    \
	} while (0)

/* A status that must be TD_OK; prints the library's message when not. */
#define CHECK_OK(call)                                                               \
	do {                                                                         \
		td_status check_st_ = (call);                                        \
		if (check_st_ != TD_OK) {                                            \
			fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__,    \
				__LINE__, #call, td_status_name(check_st_),          \
				td_last_error());                                    \
			check_failures++;                                            \
			check_current_failed = 1;                                    \
		}                                                                    \
	} while (0)

struct check_case {
	const char *name;
	void (*run)(void);
};

static int check_run(const struct check_case *cases, int n)
{
	int passed = 0, failed = 0;
	for (int i = 0; i < n; i++) {
		check_current_failed = 0;
		cases[i].run();
		printf("test %s ... %s\n", cases[i].name, check_current_failed ? "FAILED" : "ok");
		if (check_current_failed)
			failed++;
		else
			passed++;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

#endif
