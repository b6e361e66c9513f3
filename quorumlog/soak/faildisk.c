/* faildisk: an LD_PRELOAD shim that makes a process's disk "start failing".
 *
 * While the file $QL_FAILDISK_TRIGGER exists, every write and every fsync on a file under
 * $QL_FAILDISK_DIR returns -1/EIO without reaching the kernel (write, pwrite[64], writev, pwritev[64][v2],
 * fsync, fdatasync, sync_file_range, [posix_]fallocate[64], ftruncate[64]). Other fds (sockets, pipes, the log file
 * outside the dir) are untouched, and removing the trigger makes the disk work again, so a test can
 * switch a running node's disk to failing and back. The trigger is checked at most every 10 ms (a
 * clock read otherwise); the fd's path only while triggered (readlink of /proc/self/fd/N).
 * Built by quorumlog/soak/faildisk.py with gcc at test time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static char g_dir[4096];
static size_t g_dir_len;
static const char *g_trigger;
static volatile int g_failing;
static volatile long long g_next_check_ns;
static volatile long g_failed_calls;

__attribute__((constructor)) static void faildisk_init(void) {
    const char *dir = getenv("QL_FAILDISK_DIR");
    g_trigger = getenv("QL_FAILDISK_TRIGGER");
    if (dir == NULL || g_trigger == NULL) return;
    if (realpath(dir, g_dir) == NULL) {  /* the dir may not exist yet: use it as given */
        strncpy(g_dir, dir, sizeof g_dir - 1);
    }
    g_dir_len = strlen(g_dir);
    while (g_dir_len > 1 && g_dir[g_dir_len - 1] == '/') g_dir[--g_dir_len] = 0;
}

static int triggered(void) {
    if (g_trigger == NULL || g_dir_len == 0) return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (now >= g_next_check_ns) {
        g_failing = access(g_trigger, F_OK) == 0;
        g_next_check_ns = now + 10 * 1000000LL;
    }
    return g_failing;
}

static int fd_under_dir(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return (size_t)n > g_dir_len && strncmp(path, g_dir, g_dir_len) == 0 && path[g_dir_len] == '/';
}

static int fail_fd(int fd) {
    if (triggered() && fd_under_dir(fd)) {
        __sync_fetch_and_add(&g_failed_calls, 1);
        errno = EIO;
        return 1;
    }
    return 0;
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t n) { REAL(write); if (fail_fd(fd)) return -1; return real(fd, buf, n); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { REAL(pwrite); if (fail_fd(fd)) return -1; return real(fd, buf, n, off); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { REAL(pwrite64); if (fail_fd(fd)) return -1; return real(fd, buf, n, off); }
ssize_t writev(int fd, const struct iovec *v, int c) { REAL(writev); if (fail_fd(fd)) return -1; return real(fd, v, c); }
ssize_t pwritev(int fd, const struct iovec *v, int c, off_t off) { REAL(pwritev); if (fail_fd(fd)) return -1; return real(fd, v, c, off); }
ssize_t pwritev64(int fd, const struct iovec *v, int c, off_t off) { REAL(pwritev64); if (fail_fd(fd)) return -1; return real(fd, v, c, off); }
ssize_t pwritev2(int fd, const struct iovec *v, int c, off_t off, int fl) { REAL(pwritev2); if (fail_fd(fd)) return -1; return real(fd, v, c, off, fl); }
ssize_t pwritev64v2(int fd, const struct iovec *v, int c, off_t off, int fl) { REAL(pwritev64v2); if (fail_fd(fd)) return -1; return real(fd, v, c, off, fl); }
int fsync(int fd) { REAL(fsync); if (fail_fd(fd)) return -1; return real(fd); }
int fdatasync(int fd) { REAL(fdatasync); if (fail_fd(fd)) return -1; return real(fd); }
int sync_file_range(int fd, off_t off, off_t n, unsigned int fl) { REAL(sync_file_range); if (fail_fd(fd)) return -1; return real(fd, off, n, fl); }
int fallocate(int fd, int mode, off_t off, off_t n) { REAL(fallocate); if (fail_fd(fd)) return -1; return real(fd, mode, off, n); }
int posix_fallocate(int fd, off_t off, off_t n) { REAL(posix_fallocate); if (triggered() && fd_under_dir(fd)) return EIO; return real(fd, off, n); }
int posix_fallocate64(int fd, off_t off, off_t n) { REAL(posix_fallocate64); if (triggered() && fd_under_dir(fd)) return EIO; return real(fd, off, n); }
int ftruncate(int fd, off_t n) { REAL(ftruncate); if (fail_fd(fd)) return -1; return real(fd, n); }
int ftruncate64(int fd, off_t n) { REAL(ftruncate64); if (fail_fd(fd)) return -1; return real(fd, n); }
