/* harness.h: the one test harness. A test file declares
 *   static const struct th_case cases[] = {{"name", fn}, ...};
 *   int main(int argc, char **argv) { return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv); }
 * and prints TAP ("ok 3 - name", "not ok 4 - name", "ok 5 - name # SKIP why", "1..N")
 * followed by the line "N passed, N failed, N skipped". Exits 1 if anything failed.
 * argv[1], if given, runs only the cases whose name contains it. */
#ifndef TR_HARNESS_H
#define TR_HARNESS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct th_case {
    const char *name;
    void (*fn)(void);
};

/* State of the running case; read through the macros. */
extern int th_failed_;
extern const char *th_skip_;

void th_fail_(const char *file, int line, const char *expr);
void th_failf_(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int th_main(const struct th_case *cases, size_t n, int argc, char **argv);

/* Records a failure and continues. */
#define TH_CHECK(cond)                                                                    \
    do {                                                                                  \
        if (!(cond))                                                                      \
            th_fail_(__FILE__, __LINE__, #cond);                                          \
    } while (0)
/* Records a failure with a formatted message and continues. */
#define TH_CHECKF(cond, ...)                                                              \
    do {                                                                                  \
        if (!(cond))                                                                      \
            th_failf_(__FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)
/* Records a failure and returns from the case. */
#define TH_REQUIRE(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            th_fail_(__FILE__, __LINE__, #cond);                                          \
            return;                                                                       \
        }                                                                                 \
    } while (0)
/* Marks the case skipped and returns; a skip is never a pass. */
#define TH_SKIP(reason)                                                                   \
    do {                                                                                  \
        th_skip_ = (reason);                                                              \
        return;                                                                           \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
