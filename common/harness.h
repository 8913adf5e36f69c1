/* harness.h: the one test harness. A test file declares
 *   static const struct th_case cases[] = {{"name", fn}, ...};
 *   int main(int argc, char **argv) { return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv); }
 * and prints TAP ("ok 3 - name", "not ok 4 - name", "ok 5 - name # SKIP why", "1..N")
 * followed by the line "N passed, N failed, N skipped". Exits 1 if anything failed.
 * argv[1], if given, runs only the cases whose name contains it. Checks that
 * compare values (TH_EQ, TH_EQ_ST, TH_EQ_STR, TH_NEAR) print both values. */
#ifndef TR_HARNESS_H
#define TR_HARNESS_H

#include <stddef.h>
#include <string.h>

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
void th_fail_status_(const char *file, int line, const char *expr, int got, int want);
int th_main(const struct th_case *cases, size_t n, int argc, char **argv);

/* One run of every case against one setup (e.g. a kernel backend): the cases are
 * named "name [tag]" and the filter matches that name; `enter` (may be NULL) is
 * called with `arg` before each of them. A group with `skip` set runs nothing and
 * prints one case "all cases [tag] # SKIP <skip>" (if the filter matches any of its
 * cases), a failure instead when `needs_gpu` and TR_TEST_GPU=1 (as TH_SKIP_NO_GPU).
 * th_main is th_main_groups with one group without a tag. */
struct th_group {
    const char *tag;
    const char *skip;
    int needs_gpu;
    void (*enter)(void *arg);
    void *arg;
};
int th_main_groups(const struct th_case *cases, size_t n, const struct th_group *groups, size_t ngroups, int argc,
                   char **argv);

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
/* Equality and closeness checks that print both values when they differ (and
 * continue; the _REQ forms return from the case). */
#define TH_EQ(a, b)                                                                       \
    do {                                                                                  \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                         \
        if (th_a_ != th_b_)                                                               \
            th_failf_(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, th_a_, th_b_); \
    } while (0)
#define TH_EQ_REQ(a, b)                                                                   \
    do {                                                                                  \
        long long th_a_ = (long long)(a), th_b_ = (long long)(b);                         \
        if (th_a_ != th_b_) {                                                             \
            th_failf_(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, th_a_, th_b_); \
            return;                                                                       \
        }                                                                                 \
    } while (0)
/* Statuses (enum tr_status), printed by name. */
#define TH_EQ_ST(a, b)                                                                    \
    do {                                                                                  \
        int th_a_ = (int)(a), th_b_ = (int)(b);                                           \
        if (th_a_ != th_b_)                                                               \
            th_fail_status_(__FILE__, __LINE__, #a, th_a_, th_b_);                        \
    } while (0)
#define TH_EQ_ST_REQ(a, b)                                                                \
    do {                                                                                  \
        int th_a_ = (int)(a), th_b_ = (int)(b);                                           \
        if (th_a_ != th_b_) {                                                             \
            th_fail_status_(__FILE__, __LINE__, #a, th_a_, th_b_);                        \
            return;                                                                       \
        }                                                                                 \
    } while (0)
#define TH_EQ_STR(a, b)                                                                   \
    do {                                                                                  \
        const char *th_a_ = (a), *th_b_ = (b);                                            \
        if (!th_a_ || !th_b_ || strcmp(th_a_, th_b_) != 0)                                \
            th_failf_(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,           \
                      th_a_ ? th_a_ : "(null)", th_b_ ? th_b_ : "(null)");                \
    } while (0)
/* |a - b| <= atol + rtol * |b| (b is the reference); NaN never passes. */
#define TH_NEAR(a, b, atol, rtol)                                                         \
    do {                                                                                  \
        double th_a_ = (double)(a), th_b_ = (double)(b);                                  \
        double th_t_ = (double)(atol) + (double)(rtol) * (th_b_ < 0 ? -th_b_ : th_b_);     \
        double th_d_ = th_a_ - th_b_;                                                     \
        if (!(th_d_ <= th_t_ && -th_d_ <= th_t_))                                         \
            th_failf_(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (diff %.3g, tol %.3g)",  \
                      #a, #b, th_a_, th_b_, th_d_, th_t_);                                \
    } while (0)

/* Marks the case skipped and returns; a skip is never a pass. */
#define TH_SKIP(reason)                                                                   \
    do {                                                                                  \
        th_skip_ = (reason);                                                              \
        return;                                                                           \
    } while (0)

/* For cases that need a GPU: SKIP without one, unless TR_TEST_GPU=1 (what
 * `make test-gpu` sets), where a missing device fails the case. */
int th_gpu_required_(void);
#define TH_SKIP_NO_GPU(reason)                                                            \
    do {                                                                                  \
        if (th_gpu_required_()) {                                                         \
            th_failf_(__FILE__, __LINE__, "%s, and TR_TEST_GPU=1 requires a device", reason); \
            return;                                                                       \
        }                                                                                 \
        TH_SKIP(reason);                                                                  \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
