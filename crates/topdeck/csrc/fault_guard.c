// SPDX-License-Identifier: Apache-2.0
/*
 * fault_guard.c - copy out of a shared mapping that may shrink underneath.
 *
 * Readers map other processes' registry files MAP_SHARED, PROT_READ. If the
 * file is truncated while mapped, touching a page past its new end raises
 * SIGBUS, and the default action kills the reader: one bad file would take
 * down, say, a root exporter reading everyone's metrics. td_guarded_copy()
 * turns that fault into an error for that one file.
 *
 * A per-thread record names the source range this thread is copying and the
 * place to jump back to. The SIGBUS handler jumps back only for a fault the
 * kernel raised at an address inside that range; any other SIGBUS goes to
 * whatever disposition was there before us, so real bugs still die (or reach
 * the previous handler) as if we had never been installed.
 *
 * The success path makes no system call: sigsetjmp(env, 0) saves no signal
 * mask, and SA_NODEFER leaves SIGBUS unblocked while the handler runs, so
 * after siglongjmp there is no mask to restore either.
 *
 * The copy reads each aligned 8-byte word of the source with one load, never
 * with memcpy: memcpy may split a word (bytewise edges, overlapping unaligned
 * loads, rep movsb), and a value word the writer is updating must never be
 * read torn (docs/FORMAT.md, section 7).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * The copy in progress on this thread. volatile: the handler reads these
 * fields from the middle of the copy, so every store must happen, in order.
 * initial-exec: the handler may run on a thread that never copied, and a
 * first access to general-dynamic TLS may allocate, which a signal handler
 * must not.
 */
static __thread struct {
	sigjmp_buf *volatile env;	/* non-NULL while a copy is in progress */
	volatile uintptr_t lo, hi;	/* its source range: [lo, hi) */
} guard __attribute__((tls_model("initial-exec")));

static struct sigaction previous;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int install_result;

/* A SIGBUS raised by the faulting instruction itself: returning repeats it. */
static int is_fault(const siginfo_t *info)
{
	switch (info->si_code) {
	case BUS_ADRALN:
	case BUS_ADRERR:
	case BUS_OBJERR:
#ifdef BUS_MCEERR_AR
	case BUS_MCEERR_AR:
#endif
		return 1;
	}
	return 0;
}

static void set_default(int sig)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

static void on_sigbus(int sig, siginfo_t *info, void *ucontext)
{
	sigjmp_buf *env = guard.env;
	uintptr_t addr = (uintptr_t)info->si_addr;
	void (*handler)(int) = previous.sa_handler;
	sigset_t mask;

	if (env && is_fault(info) && addr >= guard.lo && addr < guard.hi) {
		guard.env = NULL;
		siglongjmp(*env, 1);
	}

	/* Not ours: hand it on as if we had never been installed. */
	if (handler != SIG_DFL && handler != SIG_IGN) {
		/* What the kernel would have done before calling it. */
		mask = previous.sa_mask;
		if (!(previous.sa_flags & SA_NODEFER))
			sigaddset(&mask, sig);
		sigprocmask(SIG_BLOCK, &mask, NULL);
		if (previous.sa_flags & SA_RESETHAND)
			set_default(sig);
		if (previous.sa_flags & SA_SIGINFO)
			previous.sa_sigaction(sig, info, ucontext);
		else
			handler(sig);
		return;	/* the kernel restores the mask on return */
	}
	if (handler == SIG_IGN && !is_fault(info))
		return;	/* sent to us, and ignored before we came */
	/*
	 * The default action (which the kernel also forces on a fault while
	 * SIGBUS is ignored): put it back. A fault repeats on return and kills
	 * the process where it happened, core and all; a sent SIGBUS is raised
	 * again, and SA_NODEFER leaves it unblocked here.
	 */
	set_default(sig);
	if (!is_fault(info))
		raise(sig);
}

static void install(void)
{
	struct sigaction sa;

	/* Save the old action before ours can run and read it. */
	if (sigaction(SIGBUS, NULL, &previous) != 0) {
		install_result = -errno;
		return;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, NULL) != 0)
		install_result = -errno;
}

/* Installs the SIGBUS handler, once per process. Returns 0 or -errno. */
int td_fault_guard_install(void)
{
	int err = pthread_once(&install_once, install);

	return err ? -err : install_result;
}

/*
 * Copies len bytes: each aligned 8-byte source word with one load, the
 * unaligned edges bytewise. Any alignment of dst is fine: tearing matters
 * only on the shared side.
 */
static void copy(unsigned char *d, const volatile unsigned char *s, size_t len)
{
	size_t i = 0;

	for (; i < len && ((uintptr_t)(s + i) & 7); i++)
		d[i] = s[i];
	for (; len - i >= 8; i += 8) {
		uint64_t word = *(const volatile uint64_t *)(s + i);

		memcpy(d + i, &word, sizeof(word));
	}
	for (; i < len; i++)
		d[i] = s[i];
}

/*
 * Copies len bytes from src to dst as copy() does. Returns 0, or 1 if src
 * faulted (dst then holds an unspecified part of the copy).
 * td_fault_guard_install() must have succeeded, or a fault kills as usual.
 * Not reentrant from a signal handler that interrupts a copy on its thread.
 */
int td_guarded_copy(void *dst, const void *src, size_t len)
{
	/*
	 * The arguments live across sigsetjmp(); volatile copies keep them out
	 * of registers that the jump back may clobber. Nothing is read after
	 * the jump back, and the handler has already disarmed the guard then.
	 */
	unsigned char *volatile d = dst;
	const unsigned char *volatile s = src;
	volatile size_t n = len;
	sigjmp_buf env;

	if (len == 0)
		return 0;
	guard.lo = (uintptr_t)src;
	guard.hi = (uintptr_t)src + len;
	if (sigsetjmp(env, 0))
		return 1;
	guard.env = &env;
	copy(d, s, n);
	guard.env = NULL;
	return 0;
}
