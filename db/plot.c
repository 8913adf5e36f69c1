/* plot.c: the line charts of `terarec runs plot`, drawn with cairo into a PNG
 * image surface or an SVG surface: a title, axes with "nice" tick labels (1, 2
 * or 5 times a power of ten), a light grid, one coloured line per series and a
 * legend. Files are written atomically through a cairo write callback. It does
 * not smooth, subsample or use log scales. */
#define TR_SUBSYS TR_SUB_DB
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cairo-svg.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>

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

static void draw(cairo_t *cr, const struct db_plot_series *s, int n, const struct db_plot_opts *o)
{
    const double W = o->width, H = o->height;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < s[i].n; k++) {
            xmin = fmin(xmin, s[i].x[k]);
            xmax = fmax(xmax, s[i].x[k]);
            if (isfinite(s[i].y[k])) {
                ymin = fmin(ymin, s[i].y[k]);
                ymax = fmax(ymax, s[i].y[k]);
            }
        }
    if (!isfinite(ymin)) {
        ymin = 0;
        ymax = 1;
    }
    const struct ticks tx = nice_ticks(xmin, xmax, 8), ty = nice_ticks(ymin, ymax, 6);
    const double ml = 80, mr = 24, mt = o->title ? 48 : 20, mb = 56;
    const double pw = W - ml - mr, ph = H - mt - mb;
#define PX(v) (ml + ((v) - tx.lo) / (tx.hi - tx.lo) * pw)
#define PY(v) (mt + ph - ((v) - ty.lo) / (ty.hi - ty.lo) * ph)

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    /* grid and tick labels */
    char buf[64];
    cairo_set_font_size(cr, 11);
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < tx.n; i++) {
        const double v = tx.lo + i * tx.step, px = floor(PX(v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, px, mt);
        cairo_line_to(cr, px, mt + ph);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        tick_label(v, tx.step, buf, sizeof buf);
        text_at(cr, px, mt + ph + 8, buf, 0.5, 0.0);
    }
    for (int i = 0; i < ty.n; i++) {
        const double v = ty.lo + i * ty.step, py = floor(PY(v)) + 0.5;
        cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
        cairo_move_to(cr, ml, py);
        cairo_line_to(cr, ml + pw, py);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        tick_label(v, ty.step, buf, sizeof buf);
        text_at(cr, ml - 8, py, buf, 1.0, 0.5);
    }
    /* axes */
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_rectangle(cr, floor(ml) + 0.5, floor(mt) + 0.5, floor(pw), floor(ph));
    cairo_stroke(cr);
    cairo_set_font_size(cr, 12);
    text_at(cr, ml + pw / 2, H - 18, o->xlabel ? o->xlabel : "", 0.5, 0.5);
    if (o->ylabel) {
        cairo_save(cr);
        cairo_translate(cr, 18, mt + ph / 2);
        cairo_rotate(cr, -M_PI / 2);
        text_at(cr, 0, 0, o->ylabel, 0.5, 0.5);
        cairo_restore(cr);
    }
    if (o->title) {
        cairo_set_font_size(cr, 15);
        text_at(cr, W / 2, 24, o->title, 0.5, 0.5);
    }

    /* the series, clipped to the plot area */
    cairo_save(cr);
    cairo_rectangle(cr, ml, mt, pw, ph);
    cairo_clip(cr);
    cairo_set_line_width(cr, 1.8);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    for (int i = 0; i < n; i++) {
        const double *c = palette[i % TR_ARRAY_SIZE(palette)];
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        int pen = 0, drawn = 0;
        for (int k = 0; k < s[i].n; k++) {
            if (!isfinite(s[i].y[k])) {
                pen = 0;
                continue;
            }
            if (pen)
                cairo_line_to(cr, PX(s[i].x[k]), PY(s[i].y[k]));
            else
                cairo_move_to(cr, PX(s[i].x[k]), PY(s[i].y[k]));
            pen = 1;
            drawn++;
        }
        cairo_stroke(cr);
        if (drawn == 1 || s[i].n <= 30) /* lone points stay visible */
            for (int k = 0; k < s[i].n; k++)
                if (isfinite(s[i].y[k])) {
                    cairo_arc(cr, PX(s[i].x[k]), PY(s[i].y[k]), 2.5, 0, 2 * M_PI);
                    cairo_fill(cr);
                }
    }
    cairo_restore(cr);

    /* legend, top right inside the plot */
    cairo_set_font_size(cr, 11);
    double lw = 0;
    for (int i = 0; i < n; i++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, s[i].label, &e);
        lw = fmax(lw, e.x_advance);
    }
    const double row = 16, bx = ml + pw - lw - 44, by = mt + 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, bx, by, lw + 36, row * n + 8);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        const double *c = palette[i % TR_ARRAY_SIZE(palette)];
        const double y = by + 4 + row * i + row / 2;
        cairo_set_source_rgb(cr, c[0], c[1], c[2]);
        cairo_set_line_width(cr, 2.5);
        cairo_move_to(cr, bx + 6, y);
        cairo_line_to(cr, bx + 24, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text_at(cr, bx + 30, y, s[i].label, 0.0, 0.5);
    }
#undef PX
#undef PY
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
    draw(cr, s, n, o);
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
