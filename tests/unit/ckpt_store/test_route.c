/* test_route.c: terarec-ckpt's router (ckpt_route in server.h): every route
 * with its fields, and every kind of refusal: not a hash, bad run names ('/',
 * '..', a leading '.'), '%' anywhere, not an absolute path, bad steps and ranks,
 * '//', unknown paths (404), known paths with another method (405), gc's keep. */
#include <string.h>

#include "../../../ckpt_store/server.h"
#include "../../../common/check.h"
#include "../../../common/harness.h"

#define H "0123456789abcdef0123456789abcdef"

static struct ckpt_route R(const char *method, const char *url)
{
    struct ckpt_route r;
    ckpt_route(method, url, &r);
    return r;
}

static void routes(void)
{
    struct ckpt_route r;
    r = R("GET", "/healthz");
    TH_EQ(r.op, CKPT_R_HEALTHZ);
    TH_EQ(r.status, 0);
    TH_EQ(R("GET", "/metrics").op, CKPT_R_METRICS);
    r = R("PUT", "/chunks/" H);
    TH_EQ(r.op, CKPT_R_CHUNK);
    TH_EQ_STR(r.hash, H);
    TH_EQ(R("HEAD", "/chunks/" H).op, CKPT_R_CHUNK);
    TH_EQ(R("GET", "/chunks/" H).op, CKPT_R_CHUNK);
    TH_EQ(R("GET", "/runs").op, CKPT_R_RUNS);
    r = R("GET", "/runs/run-1.a_b/manifests");
    TH_EQ(r.op, CKPT_R_STEPS);
    TH_EQ_STR(r.run, "run-1.a_b");
    r = R("PUT", "/runs/r/manifests/120.json");
    TH_EQ(r.op, CKPT_R_MANIFEST);
    TH_EQ_STR(r.run, "r");
    TH_EQ(r.step, 120);
    TH_EQ(R("GET", "/runs/r/manifests/0.json").step, 0);
    r = R("PUT", "/runs/r/parts/7/3.json");
    TH_EQ(r.op, CKPT_R_PART);
    TH_EQ(r.step, 7);
    TH_EQ(r.rank, 3);
    TH_EQ(R("GET", "/runs/r/parts/7/0.json").op, CKPT_R_PART);
    TH_EQ(R("GET", "/runs/r/LATEST").op, CKPT_R_LATEST);
    TH_EQ(R("PUT", "/runs/r/LATEST").op, CKPT_R_LATEST);
    r = R("POST", "/gc?keep=3");
    TH_EQ(r.op, CKPT_R_GC);
    TH_EQ(r.keep, 3);
    r = R("POST", "/gc"); /* keep all, the default grace */
    TH_EQ(r.op, CKPT_R_GC);
    TH_EQ(r.keep, 0);
    TH_EQ(r.grace_s, -1);
    r = R("POST", "/gc?keep=0&grace=5");
    TH_EQ(r.keep, 0);
    TH_EQ(r.grace_s, 5);
    r = R("PUT", "/runs/r/LATEST?keep=2");
    TH_EQ(r.op, CKPT_R_LATEST);
    TH_EQ(r.keep, 2);
    r = R("POST", "/runs/r/claim");
    TH_EQ(r.op, CKPT_R_CLAIM);
    TH_EQ_STR(r.run, "r");
    TH_EQ(R("POST", "/gc?x=1&keep=2").keep, 2);
    TH_EQ(R("GET", "/runs/r/LATEST?ignored=1").op, CKPT_R_LATEST); /* other queries are ignored */
}

/* method, url, status */
static const struct {
    const char *m, *u;
    int status;
} refusals[] = {
    /* not a hash */
    {"GET", "/chunks/0123", 400},
    {"GET", "/chunks/" H "0", 400},
    {"GET", "/chunks/0123456789ABCDEF0123456789abcdef", 400},
    {"GET", "/chunks/0123456789abcdef0123456789abcdeg", 400},
    {"GET", "/chunks/", 404},
    /* runs */
    {"GET", "/runs/a/b/LATEST", 404},
    {"GET", "/runs/../LATEST", 400},
    {"GET", "/runs/../../etc/LATEST", 400},
    {"GET", "/runs/.hidden/LATEST", 400},
    {"GET", "/runs/a b/LATEST", 400},
    {"GET", "/runs/a:b/LATEST", 400},
    {"GET", "/runs/" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/LATEST", 400},
    /* '..', '.', '//' */
    {"GET", "/chunks/../x", 400},
    {"GET", "/chunks/./" H, 400},
    {"GET", "//runs", 400},
    {"GET", "/runs//LATEST", 400},
    /* percent-encoding */
    {"GET", "/runs/%2e%2e/LATEST", 400},
    {"GET", "/chunks/%30123456789abcdef0123456789abcdef", 400},
    {"GET", "/healthz?x=%41", 400},
    /* not absolute */
    {"GET", "http://host/healthz", 400},
    {"GET", "healthz", 400},
    {"GET", "", 400},
    {"GET", "*", 400},
    /* steps and ranks */
    {"GET", "/runs/r/manifests/x.json", 400},
    {"GET", "/runs/r/manifests/-1.json", 400},
    {"GET", "/runs/r/manifests/01.json", 400},
    {"GET", "/runs/r/manifests/1.jsonx", 400},
    {"GET", "/runs/r/manifests/1", 400},
    {"GET", "/runs/r/manifests/.json", 400},
    {"GET", "/runs/r/manifests/1234567890123456789.json", 400},
    {"GET", "/runs/r/parts/x/0.json", 400},
    {"GET", "/runs/r/parts/1/r.json", 400},
    {"GET", "/runs/r/parts/1/99999999.json", 400},
    /* unknown paths */
    {"GET", "/", 404},
    {"GET", "/etc/passwd", 404},
    {"GET", "/healthz/", 404},
    {"GET", "/runs/", 404},
    {"GET", "/runs/r", 404},
    {"GET", "/runs/r/other", 404},
    {"GET", "/runs/r/parts/1", 404},
    {"GET", "/a/b/c/d/e/f/g/h", 404},
    /* other methods */
    {"POST", "/healthz", 405},
    {"DELETE", "/chunks/" H, 405},
    {"POST", "/chunks/" H, 405},
    {"PUT", "/runs", 405},
    {"PUT", "/runs/r/manifests", 405},
    {"HEAD", "/runs/r/LATEST", 405},
    {"DELETE", "/runs/r/manifests/1.json", 405},
    {"GET", "/gc?keep=1", 405},
    {"BREW", "/metrics", 405},
    /* gc's keep */
    {"POST", "/gc?grace=x", 400},
    {"POST", "/gc?grace=-1", 400},
    {"PUT", "/runs/r/LATEST?keep=x", 400},
    {"GET", "/runs/r/claim", 405},
    {"POST", "/gc?keep=x", 400},
    {"POST", "/gc?keep=", 400},
    {"POST", "/gc?keep=1000001", 400},
};

static void refuses(void)
{
    for (size_t i = 0; i < TR_ARRAY_SIZE(refusals); i++) {
        struct ckpt_route r = R(refusals[i].m, refusals[i].u);
        TH_CHECKF(r.op == CKPT_R_NONE && r.status == refusals[i].status && r.reason && *r.reason,
                  "%s %s: op %d status %d (want %d)", refusals[i].m, refusals[i].u, (int)r.op, r.status,
                  refusals[i].status);
    }
    struct ckpt_route r;
    ckpt_route(NULL, "/healthz", &r);
    TH_EQ(r.status, 400);
    ckpt_route("GET", NULL, &r);
    TH_EQ(r.status, 400);
    /* control characters and a very long URL */
    TH_EQ(R("GET", "/runs/a\nb/LATEST").status, 400);
    TH_EQ(R("GET", "/healthz\x7f").status, 400);
    static char longurl[10000];
    memset(longurl, 'a', sizeof longurl - 1);
    longurl[0] = '/';
    TH_EQ(R("GET", longurl).status, 414);
}

static const struct th_case cases[] = {
    {"routes", routes},
    {"refuses", refuses},
};

int main(int argc, char **argv)
{
    return th_main(cases, TR_ARRAY_SIZE(cases), argc, argv);
}
