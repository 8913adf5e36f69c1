/* prepare_parse.c: the Criteo TSV line parser of `terarec data prepare`:
 * label \t I1..I13 \t C1..C26, hand-written integer and hex scanning (no
 * strtol/sscanf), and the numerical transforms (the seed's float16(ln(x + 3)) or
 * float16(ln(1 + max(x, 0)))) with a table for the small integers that make up
 * nearly all of the data. It does
 * not map categorical values to ids (prepare_pass.c does, by mode).
 * Categorical values are taken as integers of 1 to 16 hex digits of either case,
 * so "abc" and "00000abc" are one value; the seed's Spark compares strings, which
 * is the same for the real data (always 8 lowercase digits). */
#define TR_SUBSYS TR_SUB_DATA
#include "prepare_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/kmath.h"

/* hex digit value + 1; 0 for any other byte */
static const uint8_t hexv[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16,
};

#define NUM_TAB_MIN (-3)
#define NUM_TAB_MAX 65535
static uint16_t num_tab[NUM_TAB_MAX - NUM_TAB_MIN + 1];
static int num_tab_ready;
static enum prepare_num_transform num_rule = PREPARE_NUM_NVIDIA;

static uint16_t num_half_direct(int64_t x)
{
    if (num_rule == PREPARE_NUM_LOG1P) /* ln(1 + max(x, 0)): negatives count as 0 */
        return x <= 0 ? 0 : km_float_to_half((float)log1p((double)x));
    if (x <= -3) /* ln of a non-positive number is null in Spark; nulls -> 0 */
        return 0;
    return km_float_to_half((float)log((double)x + 3.0));
}

void prepare_parse_init_transform(enum prepare_num_transform t)
{
    if (num_tab_ready && num_rule == t)
        return;
    num_rule = t;
    for (int64_t x = NUM_TAB_MIN; x <= NUM_TAB_MAX; x++)
        num_tab[x - NUM_TAB_MIN] = num_half_direct(x);
    num_tab_ready = 1;
}

void prepare_parse_init(void)
{
    prepare_parse_init_transform(PREPARE_NUM_NVIDIA);
}

static inline uint16_t num_half(int64_t x)
{
    if (x >= NUM_TAB_MIN && x <= NUM_TAB_MAX)
        return num_tab[x - NUM_TAB_MIN];
    return num_half_direct(x);
}

uint16_t prepare_num_half(int64_t x)
{
    return num_half(x);
}

/* The list columns (prepare_parse_set_lists). */
static uint32_t list_mask;
static char list_sep = ',';
static int list_max = 1;

void prepare_parse_set_lists(uint32_t mask, char sep, int max_hotness)
{
    list_mask = mask;
    list_sep = sep;
    list_max = max_hotness;
}

static int count_fields(const char *s, size_t n)
{
    int nf = 1;
    const char *end = s + n;
    for (const char *p = s; (p = memchr(p, '\t', (size_t)(end - p))) != NULL; p++)
        nf++;
    return nf;
}

enum prepare_bad prepare_parse_line(const char *s, size_t n, struct prepare_row *row, int *field)
{
    const char *p = s, *end = s + n;
    enum prepare_bad why = PREPARE_BAD_LABEL;
    int f = 0;

    if (n < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t')
        goto bad;
    row->label = (uint8_t)(p[0] - '0');
    p += 2;

    for (int j = 0; j < PREPARE_NUM; j++) {
        const char *q = p;
        int neg = 0;
        f = 1 + j;
        why = PREPARE_BAD_INT;
        if (q < end && (*q == '-' || *q == '+')) {
            neg = *q == '-';
            q++;
        }
        while (q < end && *q == '0' && q + 1 < end && (unsigned)(q[1] - '0') < 10u)
            q++; /* leading zeros do not count towards the 19 digits */
        const char *d0 = q;
        uint64_t v = 0;
        while (q < end && (unsigned)(*q - '0') < 10u) {
            v = v * 10u + (unsigned)(*q - '0');
            q++;
        }
        if (q >= end || *q != '\t') /* a numerical field is always followed by another field */
            goto bad;
        size_t nd = (size_t)(q - d0);
        if (nd == 0) {
            if (q != p) /* a sign without digits */
                goto bad;
            row->num[j] = 0; /* missing */
        } else {
            if (nd > 18) {
                why = PREPARE_BAD_RANGE;
                if (nd > 19 || v > (uint64_t)INT64_MAX + (uint64_t)neg)
                    goto bad;
            }
            int64_t x = neg ? (int64_t)(0u - v) : (int64_t)v;
            row->num[j] = num_half(x);
        }
        p = q + 1;
    }

    uint32_t present = 0, nlist = 0;
    why = PREPARE_BAD_HEX;
    for (int i = 0; i < PREPARE_CAT; i++) {
        const char *q = p;
        uint64_t v = 0;
        f = 1 + PREPARE_NUM + i;
        if ((list_mask >> i) & 1u) { /* a list of hex values: sep-separated, empty = none */
            row->list_at[i] = nlist;
            row->list_n[i] = 0;
            while (q < end && *q != '\t') {
                const char *d = q;
                v = 0;
                for (; q < end; q++) {
                    unsigned h = hexv[(unsigned char)*q];
                    if (!h)
                        break;
                    v = (v << 4) | (h - 1u);
                }
                if (q == d || q - d > 16 || (q < end && *q != '\t' && *q != list_sep) ||
                    (q < end && *q == list_sep && (q + 1 == end || q[1] == '\t')))
                    goto bad;
                if (row->list_n[i] == list_max) {
                    why = PREPARE_BAD_LIST;
                    goto bad;
                }
                row->list_v[nlist++] = v;
                row->list_n[i]++;
                if (q < end && *q == list_sep)
                    q++;
            }
            if (i < PREPARE_CAT - 1 ? q >= end : q != end)
                goto bad;
            row->cat[i] = 0;
            p = q + 1;
            continue;
        }
        for (; q < end; q++) {
            unsigned h = hexv[(unsigned char)*q];
            if (!h)
                break;
            v = (v << 4) | (h - 1u);
        }
        if (i < PREPARE_CAT - 1) {
            if (q >= end || *q != '\t')
                goto bad;
        } else if (q != end) {
            goto bad;
        }
        size_t nd = (size_t)(q - p);
        if (nd) {
            if (nd > 16)
                goto bad;
            row->cat[i] = v;
            present |= 1u << i;
        } else {
            row->cat[i] = 0;
        }
        p = q + 1;
    }
    row->cat_present = present;
    return PREPARE_LINE_OK;

bad:;
    int nf = count_fields(s, n);
    if (nf != PREPARE_FIELDS) {
        *field = nf;
        return PREPARE_BAD_FIELDS;
    }
    *field = f;
    return why;
}

/* Copies field f of line s[0, n) into buf as printable text (at most 40 bytes). */
static void field_text(const char *s, size_t n, int f, char *buf, size_t cap)
{
    const char *p = s, *end = s + n;
    for (int k = 0; k < f && p < end; k++) {
        const char *t = memchr(p, '\t', (size_t)(end - p));
        p = t ? t + 1 : end;
    }
    const char *q = memchr(p, '\t', (size_t)(end - p));
    if (!q)
        q = end;
    size_t k = 0, len = (size_t)(q - p);
    for (size_t i = 0; i < len && k + 4 < cap && i < 40; i++) {
        unsigned char ch = (unsigned char)p[i];
        buf[k++] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    if (len > 40 && k + 4 < cap) {
        buf[k++] = '.';
        buf[k++] = '.';
        buf[k++] = '.';
    }
    buf[k] = '\0';
}

void prepare_describe_bad(const char *s, size_t n, enum prepare_bad why, int field, char *buf, size_t cap)
{
    char t[64];
    switch (why) {
    case PREPARE_BAD_FIELDS:
        snprintf(buf, cap, "expected %d tab-separated fields, found %d", PREPARE_FIELDS, field);
        return;
    case PREPARE_BAD_LABEL:
        field_text(s, n, 0, t, sizeof t);
        snprintf(buf, cap, "label must be 0 or 1, found '%s'", t);
        return;
    case PREPARE_BAD_INT:
        field_text(s, n, field, t, sizeof t);
        snprintf(buf, cap, "I%d: '%s' is not an integer", field, t);
        return;
    case PREPARE_BAD_RANGE:
        field_text(s, n, field, t, sizeof t);
        snprintf(buf, cap, "I%d: '%s' does not fit in 64 bits", field, t);
        return;
    case PREPARE_BAD_HEX:
        field_text(s, n, field, t, sizeof t);
        if ((list_mask >> (field - PREPARE_NUM - 1)) & 1u)
            snprintf(buf, cap, "C%d: '%s' is not a list of hex values of 1 to 16 digits separated by '%c'",
                     field - PREPARE_NUM, t, list_sep);
        else
            snprintf(buf, cap, "C%d: '%s' is not a hex value of 1 to 16 digits", field - PREPARE_NUM, t);
        return;
    case PREPARE_BAD_LIST:
        field_text(s, n, field, t, sizeof t);
        snprintf(buf, cap, "C%d: '%s' holds more than --max_hotness %d values", field - PREPARE_NUM, t, list_max);
        return;
    case PREPARE_LINE_OK:
        break;
    }
    snprintf(buf, cap, "no error");
}
