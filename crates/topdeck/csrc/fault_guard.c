// SPDX-License-Identifier: Apache-2.0
/*
 * A copy from a shared mapping that survives the file being truncated under
 * it. Linux raises SIGBUS when a mapped page past the end of the file is
 * touched, whatever the mapping flags; a reader of other users' files (a
 * root exporter) must get an error for that file, not die.
 *
 * The copy runs with a per-thread jump buffer armed. The SIGBUS handler
 * jumps back only when the fault hit an armed copy on the faulting thread;
 * any other SIGBUS goes to the previous disposition. SA_NODEFER keeps SIGBUS
 * unblocked after the jump, so sigsetjmp need not save the signal mask and
 * the copy makes no system call.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static struct sigaction previous;
/*
 * volatile: the copy loop calls nothing, so without it the compiler would
 * drop the store that arms the guard as dead.
 */
static __thread sigjmp_buf *volatile armed;

static void on_sigbus(int sig, siginfo_t *info, void *ucontext)
{
	sigjmp_buf *jb = armed;

	if (jb) {
		armed = NULL;
		siglongjmp(*jb, 1);
	}
	/* Not ours: behave as if we had never been installed. */
	if (previous.sa_flags & SA_SIGINFO) {
		previous.sa_sigaction(sig, info, ucontext);
		return;
	}
	if (previous.sa_handler == SIG_IGN)
		return;
	if (previous.sa_handler != SIG_DFL) {
		previous.sa_handler(sig);
		return;
	}
	/* Default action: restore it; the faulting access repeats and kills us. */
	signal(SIGBUS, SIG_DFL);
}

int td_fault_guard_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &previous) != 0)
		return -errno;
	return 0;
}

/*
 * Copies len bytes. When both pointers are 8-aligned, every whole word is
 * copied with one aligned 8-byte load, so no value word is ever torn
 * (memcpy may copy bytewise); the tail, and unaligned copies, go bytewise.
 * Returns 0, or 1 if the source faulted.
 */
int td_guarded_copy(void *dst, const void *src, size_t len)
{
	sigjmp_buf jb;
	size_t i = 0;

	if (sigsetjmp(jb, 0)) {
		armed = NULL;
		return 1;
	}
	armed = &jb;
	if ((((uintptr_t)src | (uintptr_t)dst) & 7) == 0) {
		volatile const uint64_t *s = src;
		uint64_t *d = dst;

		for (; i < len / 8; i++)
			d[i] = s[i];
		i *= 8;
	}
	for (; i < len; i++)
		((unsigned char *)dst)[i] = ((volatile const unsigned char *)src)[i];
	armed = NULL;
	return 0;
}
