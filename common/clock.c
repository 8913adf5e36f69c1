/* clock.c: monotonic and wall-clock seconds (clock_gettime). */
#define _POSIX_C_SOURCE 200809L
#include "clock.h"

#include <time.h>

double tr_clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double tr_clock_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
