/* LD_PRELOAD shim: CLOCK_REALTIME moved by the seconds written in $WALLCLOCK_OFFSET_FILE
 * (re-read at every call; "+30", "-3600", "0"), every other clock untouched. A process's
 * wall clock then steps as under `date -s` or an NTP step while its monotonic clock goes
 * on, without changing the machine's clock. libfaketime does the same, but with a
 * monotonic clock left alone its clock_nanosleep fails Python's time.sleep with EINVAL
 * (Debian bookworm's 0.9.10). Built by tests/test_reliability_clock_steps.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
    const char *path = getenv("WALLCLOCK_OFFSET_FILE");
    char text[64];
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    return (long long)(strtod(text, NULL) * 1e9);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(id, ts);
    if (result == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return result;
}
