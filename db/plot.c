/* plot.c: the line charts of `terarec runs plot`, drawn with cairo into a PNG
 * image surface or an SVG surface: a title, axes with "nice" tick labels (1, 2
 * or 5 times a power of ten; decades on a log scale), a light grid, one coloured
 * line per series (raw and faint under its EMA when smoothed), a lone point as a
 * dot with its value, vertical markers (evaluations, events) and a legend beside
 * the plot. Files are written atomically through a cairo write callback. It does
 * not subsample. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "../common/log.h"
#include "db_internal.h"

static const double palette[][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
    {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812},
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && !strcasecmp(s + n - k, suffix);
}

int db_plot_format_ok(const char *path)
{
    return path && (ends_with(path, ".png") || ends_with(path, ".svg"));
}

/* Ticks for [lo, hi]: a step of 1, 2 or 5 times a power of ten giving about
 * `want` intervals; the axis is widened to whole steps. */
struct ticks {
    double lo, hi, step;
    int n; /* tick count */
};

static struct ticks nice_ticks(double lo, double hi, int want)
{
    struct ticks t;
    if (!(hi > lo)) {
        double pad = lo != 0 ? fabs(lo) * 0.05 : 1.0;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / want;
    double p = pow(10.0, floor(log10(raw)));
    double f = raw / p;
    t.step = (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * p;
    t.lo = floor(lo / t.step + 1e-9) * t.step;
    t.hi = ceil(hi / t.step - 1e-9) * t.step;
    t.n = (int)llround((t.hi - t.lo) / t.step) + 1;
    return t;
}

static void tick_label(double v, double step, char *buf, size_t n)
{
    if (fabs(v) < step * 1e-9)
        v = 0;
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (fabs(v) >= 1e6 || (v != 0 && fabs(v) < 1e-4))
        snprintf(buf, n, "%.3g", v);
    else
        snprintf(buf, n, "%.*f", decimals, v);
}

struct sink {
    struct tr_file_atomic f;
    enum tr_status rc;
};

static cairo_status_t sink_write(void *closure, const unsigned char *data, unsigned int len)
{
    struct sink *s = closure;
    if (s->rc == TR_OK)
        s->rc = tr_file_atomic_write(&s->f, data, len);
    return s->rc == TR_OK ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double ax, double ay)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.width * ax - e.x_bearing, y - e.height * ay - e.y_bearing);
    cairo_show_text(cr, s);
}

void db_plot_ema(const double *y, double *out, int n, double w)
{
    double last = 0, bias = 1;
    for (int i = 0; i < n; i++) {
        const double v = y[i];
        if (!isfinite(v) || !(w > 0)) {
            out[i] = v;
            continue;
        }
        last = last * w + (1 - w) * v;
        bias *= w;
        out[i] = last / (1 - bias);
    }
}

/* The y a series is drawn at: log10 on a log scale (NaN for y <= 0). */
static double ymap(double y, int logscale)
{
    if (!logscale)
        return y;
    return y > 0 ? log10(y) : NAN;
}

/* One series' line (and its points when few), clipped by the caller. */
static void draw_line(cairo_t *cr, const double *x, const double *y, int n, const struct db_plot_opts *o,
                      double (*px)(const void *, double), double (*py)(const void *, double), const void *ax)
{
    int pen = 0, drawn = 0;
    for (int k = 0; k < n; k++) {
        const double v = ymap(y[k], o->logscale);
        if (!isfinite(v)) {
            pen = 0;
            continue;
        }
        if (pen)
            cairo_line_to(cr, px(ax, x[k]), py(ax, v));
        else
            cairo_move_to(cr, px(ax, x[k]), py(ax, v));
        pen = 1;
        drawn++;
    }
    cairo_stroke(cr);
    if (drawn > 1 && n <= 30) /* few points: each visible */
        for (int k = 0; k < n; k++)
            if (isfinite(ymap(y[k], o->logscale))) {
                cairo_arc(cr, px(ax, x[k]), py(ax, ymap(y[k], o->logscale)), 2.5, 0, 2 * M_PI);
                cairo_fill(cr);
            }
}

struct axes {
    struct ticks tx, ty;
    double ml, mt, pw, ph;
};

static double ax_px(const void *p, double v)
{
    const struct axes *a = p;
    return a->ml + (v - a->tx.lo) / (a->tx.hi - a->tx.lo) * a->pw;
}

static double ax_py(const void *p, double v)
{
    const struct axes *a = p;
    return a->mt + a->ph - (v - a->ty.lo) / (a->ty.hi - a->ty.lo) * a->ph;
}

static void draw(cairo_t *cr, const struct db_plot_series *s, int n, const struct db_plot_opts *o, double *const *sm)
{
    const double W = o->width, H = o->height;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < s[i].n; k++) {
            xmin = fmin(xmin, s[i].x[k]);
            xmax = fmax(xmax, s[i].x[k]);
            const double v = ymap(s[i].y[k], o->logscale);
            if (isfinite(v)) {
                ymin = fmin(ymin, v);
                ymax = fmax(ymax, v);
            }
        }
    if (!isfinite(ymin)) {
        ymin = 0;
        ymax = 1;
    }
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    /* the legend's width first: it goes right of the plot, never over the data */
    cairo_set_font_size(cr, 11);
    double lw = 0;
    for (int i = 0; i < n; i++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, s[i].label, &e);
        lw = fmax(lw, e.x_advance);
    }
    lw = fmin(lw + 36, W * 0.4);
    struct axes a;
    a.tx = nice_ticks(xmin, xmax, 8);
    a.ty = nice_ticks(ymin, ymax, 6);
    /* the y ticks where they are drawn (log10 of the values on a log scale) */
    double yt[64];
    int nyt = 0;
    struct ticks lin = a.ty; /* the values' ticks on a log scale within a decade */
    if (o->logscale && ymax - ymin >= 1) { /* whole decades */
        a.ty.step = ceil((ymax - ymin) / 6);
        a.ty.lo = floor(ymin / a.ty.step) * a.ty.step;
        a.ty.hi = ceil(ymax / a.ty.step) * a.ty.step;
        a.ty.n = (int)llround((a.ty.hi - a.ty.lo) / a.ty.step) + 1;
    } else if (o->logscale) { /* less than a decade: round values, placed by their logarithm */
        lin = nice_ticks(pow(10.0, ymin), pow(10.0, ymax), 6);
        if (lin.lo <= 0)
            lin.lo = pow(10.0, ymin);
        a.ty.lo = log10(lin.lo);
        a.ty.hi = log10(lin.hi);
        for (int i = 0; i < lin.n && nyt < 64; i++)
            if (lin.lo + i * lin.step > 0)
                yt[nyt++] = log10(lin.lo + i * lin.step);
    }
    if (!nyt)
        for (int i = 0; i < a.ty.n && nyt < 64; i++)
            yt[nyt++] = a.ty.lo + i * a.ty.step;
    a.ml = 80;
    a.mt = o->title ? 48 : 20;
    const double mr = 24 + lw + 12, mb = 56;
    a.pw = W - a.ml - mr;
    a.ph = H - a.mt - mb;
    const double ml = a.ml, mt = a.mt, pw = a.pw, ph = a.ph;

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);

    /* grid and tick labels */
    char buf[64];
    cairo_set_font_size(cr, 11);
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < a.tx.n; i++) {
        const double v = a.tx.lo + i * a.tx.step, px = floor(ax_px(&a, v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, px, mt);
        cairo_line_to(cr, px, mt + ph);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        tick_label(v, a.tx.step, buf, sizeof buf);
        text_at(cr, px, mt + ph + 8, buf, 0.5, 0.0);
    }
    for (int i = 0; i < nyt; i++) {
        const double v = yt[i], py = floor(ax_py(&a, v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, ml, py);
        cairo_line_to(cr, ml + pw, py);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        if (o->logscale && ymax - ymin < 1) {
            tick_label(pow(10.0, v), lin.step, buf, sizeof buf);
        } else if (o->logscale) {
            snprintf(buf, sizeof buf, "%.3g", pow(10.0, v));
        } else {
            tick_label(v, a.ty.step, buf, sizeof buf);
        }
        text_at(cr, ml - 8, py, buf, 1.0, 0.5);
    }
    /* axes */
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_rectangle(cr, floor(ml) + 0.5, floor(mt) + 0.5, floor(pw), floor(ph));
    cairo_stroke(cr);
    cairo_set_font_size(cr, 12);
    text_at(cr, ml + pw / 2, H - 18, o->xlabel ? o->xlabel : "", 0.5, 0.5);
    if (o->ylabel) {
        char yl[160];
        snprintf(yl, sizeof yl, "%s%s", o->ylabel, o->logscale ? " (log scale)" : "");
        cairo_save(cr);
        cairo_translate(cr, 18, mt + ph / 2);
        cairo_rotate(cr, -M_PI / 2);
        text_at(cr, 0, 0, yl, 0.5, 0.5);
        cairo_restore(cr);
    }
    if (o->title) {
        cairo_set_font_size(cr, 15);
        text_at(cr, ml + pw / 2, 24, o->title, 0.5, 0.5);
    }

    /* the markers, then the series, clipped to the plot area */
    cairo_save(cr);
    cairo_rectangle(cr, ml, mt, pw, ph);
    cairo_clip(cr);
    cairo_set_font_size(cr, 10);
    double last_px = -1, label_y = mt + 4; /* labels of markers at one step go one after the other */
    for (int i = 0; i < o->nmarks; i++) {
        const struct db_plot_mark *m = &o->marks[i];
        if (!(m->x >= a.tx.lo && m->x <= a.tx.hi))
            continue;
        const double px = floor(ax_px(&a, m->x)) + 0.5;
        const double dash[] = {4, 3};
        cairo_set_dash(cr, dash, m->event ? 0 : 2, 0);
        if (m->event)
            cairo_set_source_rgba(cr, 0.78, 0.16, 0.16, 0.8);
        else
            cairo_set_source_rgba(cr, 0.18, 0.49, 0.2, 0.6);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, px, mt);
        cairo_line_to(cr, px, mt + ph);
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        if (m->label) {
            if (fabs(px - last_px) > 1)
                label_y = mt + 4;
            cairo_text_extents_t e;
            cairo_text_extents(cr, m->label, &e);
            cairo_save(cr);
            cairo_translate(cr, px + 3, label_y);
            cairo_rotate(cr, M_PI / 2);
            text_at(cr, 0, 0, m->label, 0.0, 1.0);
            cairo_restore(cr);
            label_y += e.x_advance + 8;
            last_px = px;
        }
    }
    cairo_set_line_width(cr, 1.8);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int i = 0; i < n; i++) {
        const double *c = palette[i % TR_ARRAY_SIZE(palette)];
        if (sm && sm[i]) { /* the raw values faint, the smoothed ones over them */
            cairo_set_source_rgba(cr, c[0], c[1], c[2], 0.3);
            cairo_set_line_width(cr, 1.0);
            draw_line(cr, s[i].x, s[i].y, s[i].n, o, ax_px, ax_py, &a);
            cairo_set_line_width(cr, 1.8);
        }
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        draw_line(cr, s[i].x, sm && sm[i] ? sm[i] : s[i].y, s[i].n, o, ax_px, ax_py, &a);
    }
    cairo_restore(cr);
    /* a series of one point: a dot and its value (outside the clip: the value may
     * stand near an edge) */
    cairo_set_font_size(cr, 12);
    for (int i = 0; i < n; i++) {
        int lone = -1, cnt = 0;
        for (int k = 0; k < s[i].n; k++)
            if (isfinite(ymap(s[i].y[k], o->logscale))) {
                lone = k;
                cnt++;
            }
        if (cnt != 1)
            continue;
        const double *c = palette[i % TR_ARRAY_SIZE(palette)];
        const double px = ax_px(&a, s[i].x[lone]), py = ax_py(&a, ymap(s[i].y[lone], o->logscale));
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_arc(cr, px, py, 5, 0, 2 * M_PI);
        cairo_fill(cr);
        snprintf(buf, sizeof buf, "%.6g", s[i].y[lone]);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text_at(cr, px + 9, py - 9, buf, 0.0, 0.5);
    }

    /* legend, right of the plot */
    cairo_set_font_size(cr, 11);
    const double row = 16, bx = ml + pw + 12, by = mt;
    for (int i = 0; i < n; i++) {
        const double *c = palette[i % TR_ARRAY_SIZE(palette)];
        const double y = by + 4 + row * i + row / 2;
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 2.5);
        cairo_move_to(cr, bx, y);
        cairo_line_to(cr, bx + 18, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        cairo_save(cr);
        cairo_rectangle(cr, bx + 24, y - row / 2, W - bx - 24, row);
        cairo_clip(cr);
        text_at(cr, bx + 24, y, s[i].label, 0.0, 0.5);
        cairo_restore(cr);
    }
}

enum tr_status db_plot_write(const struct db_plot_series *s, int n, const struct db_plot_opts *o)
{
    if (!db_plot_format_ok(o->path)) {
        LOG_ERROR("cannot plot to '%s': the file must end in .png or .svg", o->path ? o->path : "");
        return TR_ERR_ARG;
    }
    const int svg = ends_with(o->path, ".svg");
    struct sink k = {.f = {.fd = -1}, .rc = TR_OK};
    TR_CHECK(tr_file_atomic_open(&k.f, o->path));
    cairo_surface_t *sf = svg ? cairo_svg_surface_create_for_stream(sink_write, &k, o->width, o->height)
                              : cairo_image_surface_create(CAIRO_FORMAT_ARGB32, o->width, o->height);
    cairo_t *cr = cairo_create(sf);
    double **sm = NULL; /* the smoothed series (none when o->smooth is 0 or memory is short: then raw) */
    if (o->smooth > 0 && (sm = tr_calloc((size_t)(n > 0 ? n : 1), sizeof *sm)) != NULL)
        for (int i = 0; i < n; i++)
            if ((sm[i] = tr_malloc((size_t)(s[i].n > 0 ? s[i].n : 1) * sizeof **sm)) != NULL)
                db_plot_ema(s[i].y, sm[i], s[i].n, o->smooth);
    draw(cr, s, n, o, sm);
    for (int i = 0; sm && i < n; i++)
        tr_free(sm[i]);
    tr_free(sm);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st == CAIRO_STATUS_SUCCESS && !svg)
        st = cairo_surface_write_to_png_stream(sf, sink_write, &k);
    cairo_surface_finish(sf);
    if (st == CAIRO_STATUS_SUCCESS)
        st = cairo_surface_status(sf);
    cairo_surface_destroy(sf);
    /* drop cairo's font caches (and the fontconfig patterns they hold): a chart is
     * drawn once per process, and leak checkers should see nothing left */
    cairo_debug_reset_static_data();
    FcFini();
    if (k.rc == TR_OK && st != CAIRO_STATUS_SUCCESS) {
        LOG_ERROR("cannot draw the chart '%s': %s", o->path, cairo_status_to_string(st));
        k.rc = st == CAIRO_STATUS_NO_MEMORY ? TR_ERR_NOMEM : TR_ERR_IO;
    }
    if (k.rc != TR_OK) {
        tr_file_atomic_abort(&k.f);
        return k.rc;
    }
    return tr_file_atomic_commit(&k.f);
}
