/* Runs rlide's seccomp filter in a real kernel and reports what each denied syscall does.
 *
 * Built statically for the guest's ABI and booted as /init (PID 1) of a tiny initramfs under
 * qemu, or run directly on the host. It reads the filter from /filter.bin (or argv[1]) and
 * the syscall *names* from probe_list.h, generated from envpool.sandbox.seccomp's deny lists.
 * The numbers come from this toolchain's own <sys/syscall.h>, not from rlide's tables, so a wrong
 * number in those tables shows up as a call the filter lets through.
 *
 * Every denied call is made with all arguments -1: an invalid pointer, fd, flag set or magic
 * number for each of them, so the unfiltered (control) call fails harmlessly in the kernel.
 * Output, one line each, then "PROBE DONE":
 *   CALL <name> <expected errno> <control errno> <filtered errno>   (0: the call succeeded)
 *   CHECK <what> <ok|FAIL> <detail>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct probe {
    const char *name;
    long nr;
    int expected;
};

#define DENY(name, err) {#name, SYS_##name, err},
static const struct probe PROBES[] = {
#include "probe_list.h"
};
#undef DENY

static int call_errno(long nr) {
    long r = syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L);
    return r == -1 ? errno : 0;
}

static void *thread_main(void *arg) { return arg; }

static void check(const char *what, int ok, const char *detail) {
    printf("CHECK %s %s %s\n", what, ok ? "ok" : "FAIL", detail);
}

static void child_status(char *out, size_t size, int status) {
    if (WIFSIGNALED(status))
        snprintf(out, size, "signal=%d", WTERMSIG(status));
    else
        snprintf(out, size, "exit=%d", WEXITSTATUS(status));
}

/* A child that runs argv under the filter (or without it) and reports how it ended. */
static int run_foreign(const char *path, struct sock_fprog *prog, int *status) {
    pid_t pid = fork();
    if (pid == 0) {
        if (prog && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog)))
            _exit(90);
        execl(path, path, (char *)NULL);
        _exit(91);
    }
    return waitpid(pid, status, 0) == pid ? 0 : -1;
}

static void probe(struct sock_fprog *prog, int controls[]) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog)) {
        printf("CHECK install FAIL errno=%d\n", errno);
        return;
    }
    check("install", 1, "-");
    for (size_t i = 0; i < sizeof PROBES / sizeof PROBES[0]; i++)
        printf("CALL %s %d %d %d\n", PROBES[i].name, PROBES[i].expected, controls[i], call_errno(PROBES[i].nr));

    char detail[64];
    check("getpid", syscall(SYS_getpid) == getpid(), "-");
    /* clone(2) with a namespace flag is denied on its flags argument; plain fork is not. */
    long r = syscall(SYS_clone, (long)(CLONE_NEWUSER | SIGCHLD), 0L, 0L, 0L, 0L);
    if (r == 0) _exit(0);
    snprintf(detail, sizeof detail, "errno=%d", r == -1 ? errno : 0);
    check("clone_newuser_denied", r == -1 && errno == EPERM, detail);
    r = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
    if (r == 0) _exit(7);
    int status = 0;
    if (r > 0) waitpid((pid_t)r, &status, 0);
    child_status(detail, sizeof detail, status);
    check("plain_clone_runs", r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 7, detail);
    /* glibc tries clone3 first; ENOSYS from the filter must make it fall back to clone. */
    pthread_t thread;
    void *ret = NULL;
    int err = pthread_create(&thread, NULL, thread_main, (void *)PROBES);
    if (!err) err = pthread_join(thread, &ret);
    snprintf(detail, sizeof detail, "err=%d", err);
    check("pthread_create", err == 0 && ret == (void *)PROBES, detail);
    pid_t pid = fork();
    if (pid == 0) _exit(5);
    status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    child_status(detail, sizeof detail, status);
    check("fork", pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 5, detail);
}

static unsigned char filter[65536];

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/filter.bin";
    int is_init = getpid() == 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fd = open(path, O_RDONLY);
    ssize_t size = fd < 0 ? -1 : read(fd, filter, sizeof filter);
    if (size <= 0 || size % 8) {
        printf("CHECK read_filter FAIL %s\n", path);
    } else {
        struct sock_fprog prog = {.len = (unsigned short)(size / 8), .filter = (struct sock_filter *)filter};
        size_t n = sizeof PROBES / sizeof PROBES[0];
        int controls[sizeof PROBES / sizeof PROBES[0]];
        for (size_t i = 0; i < n; i++) controls[i] = call_errno(PROBES[i].nr);

        /* A foreign-ABI binary (32-bit ARM on aarch64) runs without the filter and is killed
         * with it: the filter's first test, on the audit arch. */
        const char *foreign = argc > 2 ? argv[2] : "/foreign";
        if (access(foreign, X_OK) == 0) {
            int status = 0;
            char detail[64];
            run_foreign(foreign, NULL, &status);
            child_status(detail, sizeof detail, status);
            check("foreign_abi_runs_unfiltered", WIFEXITED(status) && WEXITSTATUS(status) == 0, detail);
            run_foreign(foreign, &prog, &status);
            child_status(detail, sizeof detail, status);
            check("foreign_abi_killed", WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS, detail);
        }
        /* The filter goes on in a child so PID 1 can still power the guest off. */
        pid_t pid = fork();
        if (pid == 0) {
            probe(&prog, controls);
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        char detail[64];
        child_status(detail, sizeof detail, status);
        check("probe_exited", WIFEXITED(status) && WEXITSTATUS(status) == 0, detail);
    }
    printf("PROBE DONE\n");
    fflush(stdout);
    if (is_init) {
        sync();
        reboot(RB_POWER_OFF);
    }
    return 0;
}
