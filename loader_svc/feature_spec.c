/* feature_spec.c: FeatureSpec YAML through libyaml's document API (anchors and
 * aliases are resolved by libyaml), the DLRM checks of the seed's
 * check_feature_spec, and a plain writer. It does not support csv or parquet
 * chunks (the seed's DLRM reads split_binary only). */
#define TR_SUBSYS TR_SUB_DATA
#define _POSIX_C_SOURCE 200809L
#include "feature_spec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "../common/alloc.h"
#include "../common/check.h"
#include "../common/file.h"
#include "batch.h"

struct ctx {
    yaml_document_t *doc;
    const char *path;
};

static int line_of(const yaml_node_t *n)
{
    return n ? (int)n->start_mark.line + 1 : 0;
}

static enum tr_status bad(const struct ctx *c, const yaml_node_t *n, const char *key, const char *what)
{
    LOG_ERROR("feature spec '%s': '%s' %s (line %d)", c->path, key, what, line_of(n));
    return TR_ERR_FORMAT;
}

static yaml_node_t *map_get(const struct ctx *c, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(c->doc, p->value);
    }
    return NULL;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* Copies a sequence of scalars into a tr_malloc'd array of strings. */
static enum tr_status str_list(const struct ctx *c, yaml_node_t *seq, const char *key, char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!seq || seq->type != YAML_SEQUENCE_NODE)
        return bad(c, seq, key, "must be a list");
    int cnt = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
    char **v = tr_calloc((size_t)(cnt ? cnt : 1), sizeof *v);
    if (!v)
        return TR_ERR_NOMEM;
    *out = v;
    for (int i = 0; i < cnt; i++) {
        const char *s = scalar(yaml_document_get_node(c->doc, seq->data.sequence.items.start[i]));
        if (!s)
            return bad(c, seq, key, "must hold only names");
        if (!(v[i] = tr_strdup(s)))
            return TR_ERR_NOMEM;
        *n = i + 1;
    }
    return TR_OK;
}

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++)
        tr_free(v[i]);
    tr_free(v);
}

/* A positive integer scalar of at most max into *out; 0 when it is not one. */
static int positive_int(const char *s, int64_t max, int32_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < 1 || v > max)
        return 0;
    *out = (int32_t)v;
    return 1;
}

/* A feature's multi-hot keys: hotness (a positive integer, or "variable" with
 * max_hotness) and lengths_dtype. */
static enum tr_status read_hotness(const struct ctx *c, yaml_node_t *v, struct feature_spec_feature *f)
{
    yaml_node_t *hn = map_get(c, v, "hotness"), *mn = map_get(c, v, "max_hotness"),
                *ln = map_get(c, v, "lengths_dtype");
    if (hn && scalar(hn) && !strcmp(scalar(hn), "variable"))
        f->variable = 1;
    else if (hn && !positive_int(scalar(hn), BATCH_MAX_HOT, &f->hotness))
        return bad(c, hn, f->name, "has a hotness that is neither an integer in [1, 65535] nor 'variable'");
    if (mn && !positive_int(scalar(mn), BATCH_MAX_HOT, &f->max_hotness))
        return bad(c, mn, f->name, "has a max_hotness that is not an integer in [1, 65535]");
    if (f->variable && !mn)
        return bad(c, hn, f->name, "has hotness 'variable' but no max_hotness (the most ids a sample holds)");
    if (!f->variable && mn && f->max_hotness != f->hotness)
        return bad(c, mn, f->name, "has a max_hotness other than its fixed hotness");
    if (ln) {
        const char *ls = scalar(ln);
        if (!f->variable)
            return bad(c, ln, f->name, "has lengths_dtype but not hotness 'variable'");
        if (!ls || (strcmp(ls, "uint8") && strcmp(ls, "uint16") && strcmp(ls, "int32")))
            return bad(c, ln, f->name, "has a lengths_dtype other than uint8, uint16 or int32");
        if (!(f->lengths_dtype = tr_strdup(ls)))
            return TR_ERR_NOMEM;
    }
    return TR_OK;
}

static enum tr_status read_features(const struct ctx *c, yaml_node_t *fsn, struct feature_spec *fs)
{
    if (!fsn || fsn->type != YAML_MAPPING_NODE)
        return bad(c, fsn, "feature_spec", "must be a mapping of feature names");
    int n = (int)(fsn->data.mapping.pairs.top - fsn->data.mapping.pairs.start);
    fs->features = tr_calloc((size_t)(n ? n : 1), sizeof *fs->features);
    if (!fs->features)
        return TR_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        yaml_node_pair_t *p = fsn->data.mapping.pairs.start + i;
        const char *name = scalar(yaml_document_get_node(c->doc, p->key));
        yaml_node_t *v = yaml_document_get_node(c->doc, p->value);
        struct feature_spec_feature *f = &fs->features[i];
        f->cardinality = -1;
        if (!name)
            return bad(c, v, "feature_spec", "has a key that is not a name");
        for (int j = 0; j < i; j++) {
            if (!strcmp(fs->features[j].name, name)) {
                LOG_ERROR("feature spec '%s': feature_spec lists feature '%s' twice (lines %d and %d)", c->path,
                          name, line_of(yaml_document_get_node(c->doc, fsn->data.mapping.pairs.start[j].key)),
                          line_of(yaml_document_get_node(c->doc, p->key)));
                return TR_ERR_FORMAT;
            }
        }
        if (!(f->name = tr_strdup(name)))
            return TR_ERR_NOMEM;
        fs->nfeatures = i + 1;
        if (v && v->type == YAML_SCALAR_NODE && (!*scalar(v) || !strcmp(scalar(v), "null")))
            continue; /* "name:" with no metadata */
        if (!v || v->type != YAML_MAPPING_NODE)
            return bad(c, v, name, "must map to {dtype, cardinality}");
        const char *dt = scalar(map_get(c, v, "dtype"));
        if (dt && !(f->dtype = tr_strdup(dt)))
            return TR_ERR_NOMEM;
        yaml_node_t *card = map_get(c, v, "cardinality");
        if (card) {
            const char *cs = scalar(card);
            char *end = NULL;
            errno = 0;
            long long cv = cs ? strtoll(cs, &end, 10) : 0;
            if (cs && !strcmp(cs, "auto"))
                f->cardinality = -1;
            else if (!cs || end == cs || *end || errno || cv < 1)
                return bad(c, card, name, "has a cardinality that is not a positive integer");
            else
                f->cardinality = cv;
        }
        TR_CHECK(read_hotness(c, v, f));
    }
    return TR_OK;
}

/* "a.bin" and "./a.bin" name one file. */
static const char *plain_name(const char *f)
{
    while (f[0] == '.' && f[1] == '/')
        f += 2;
    return f;
}

/* Chunk k of split `split` against itself and chunks 0 .. k-1: a file read twice
 * (once for another feature, which would then be silently lost) or a feature in
 * two places. */
static enum tr_status check_chunk_dups(const struct ctx *c, const char *split, const struct feature_spec_mapping *m,
                                       int k, const yaml_node_t *node)
{
    const struct feature_spec_chunk *ck = &m->chunks[k];
    for (int j = 0; j <= k; j++) {
        const struct feature_spec_chunk *cj = &m->chunks[j];
        for (int a = 0; a < ck->nfiles; a++) {
            for (int b = 0; b < (j == k ? a : cj->nfiles); b++) {
                if (!strcmp(plain_name(ck->files[a]), plain_name(cj->files[b]))) {
                    LOG_ERROR("feature spec '%s': file '%s' is listed twice, in source_spec.%s[%d].files and "
                              "source_spec.%s[%d].files (line %d)",
                              c->path, ck->files[a], split, j, split, k, line_of(node));
                    LOG_HINT("each file holds the columns of one chunk; give every chunk its own file");
                    return TR_ERR_FORMAT;
                }
            }
        }
        for (int a = 0; a < ck->nfeatures; a++) {
            for (int b = 0; b < (j == k ? a : cj->nfeatures); b++) {
                if (!strcmp(ck->features[a], cj->features[b])) {
                    LOG_ERROR("feature spec '%s': feature '%s' is listed twice, in source_spec.%s[%d].features and "
                              "source_spec.%s[%d].features (line %d)",
                              c->path, ck->features[a], split, j, split, k, line_of(node));
                    return TR_ERR_FORMAT;
                }
            }
        }
    }
    return TR_OK;
}

/* A feature in two channels, or twice in one: the DLRM view would read it as two
 * inputs, or drop one. */
static enum tr_status check_channel_dups(const struct ctx *c, const struct feature_spec *fs, yaml_node_t *const nodes[3])
{
    char **const lists[3] = {fs->categorical, fs->numerical, fs->label};
    const int counts[3] = {fs->ncategorical, fs->nnumerical, fs->nlabel};
    static const char *const names[3] = {"categorical", "numerical", "label"};
    for (int x = 0; x < 3; x++) {
        for (int i = 0; i < counts[x]; i++) {
            for (int y = 0; y <= x; y++) {
                for (int j = 0; j < (y == x ? i : counts[y]); j++) {
                    if (strcmp(lists[x][i], lists[y][j]) != 0)
                        continue;
                    if (x == y)
                        LOG_ERROR("feature spec '%s': channel_spec.%s lists feature '%s' twice (line %d)", c->path,
                                  names[x], lists[x][i], line_of(nodes[x]));
                    else
                        LOG_ERROR("feature spec '%s': feature '%s' is in two channels, channel_spec.%s and "
                                  "channel_spec.%s (lines %d and %d)",
                                  c->path, lists[x][i], names[y], names[x], line_of(nodes[y]), line_of(nodes[x]));
                    return TR_ERR_FORMAT;
                }
            }
        }
    }
    return TR_OK;
}

static enum tr_status read_sources(const struct ctx *c, yaml_node_t *ss, struct feature_spec *fs)
{
    if (!ss || ss->type != YAML_MAPPING_NODE)
        return bad(c, ss, "source_spec", "must be a mapping of splits (train, test)");
    int n = (int)(ss->data.mapping.pairs.top - ss->data.mapping.pairs.start);
    fs->mappings = tr_calloc((size_t)(n ? n : 1), sizeof *fs->mappings);
    if (!fs->mappings)
        return TR_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        yaml_node_pair_t *p = ss->data.mapping.pairs.start + i;
        const char *name = scalar(yaml_document_get_node(c->doc, p->key));
        yaml_node_t *seq = yaml_document_get_node(c->doc, p->value);
        struct feature_spec_mapping *m = &fs->mappings[i];
        if (!name)
            return bad(c, seq, "source_spec", "has a key that is not a name");
        for (int j = 0; j < i; j++) {
            if (!strcmp(fs->mappings[j].name, name)) {
                LOG_ERROR("feature spec '%s': source_spec lists split '%s' twice (line %d)", c->path, name,
                          line_of(yaml_document_get_node(c->doc, p->key)));
                return TR_ERR_FORMAT;
            }
        }
        if (!(m->name = tr_strdup(name)))
            return TR_ERR_NOMEM;
        fs->nmappings = i + 1;
        if (!seq || seq->type != YAML_SEQUENCE_NODE)
            return bad(c, seq, name, "must be a list of chunks");
        int nc = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
        m->chunks = tr_calloc((size_t)(nc ? nc : 1), sizeof *m->chunks);
        if (!m->chunks)
            return TR_ERR_NOMEM;
        for (int k = 0; k < nc; k++) {
            yaml_node_t *ch = yaml_document_get_node(c->doc, seq->data.sequence.items.start[k]);
            struct feature_spec_chunk *chunk = &m->chunks[k];
            m->nchunks = k + 1;
            if (!ch || ch->type != YAML_MAPPING_NODE)
                return bad(c, ch, name, "chunks must be mappings {type, features, files}");
            const char *type = scalar(map_get(c, ch, "type"));
            if (!type)
                return bad(c, ch, name, "has a chunk without 'type'");
            if (!(chunk->type = tr_strdup(type)))
                return TR_ERR_NOMEM;
            TR_CHECK(str_list(c, map_get(c, ch, "features"), "features", &chunk->features, &chunk->nfeatures));
            TR_CHECK(str_list(c, map_get(c, ch, "files"), "files", &chunk->files, &chunk->nfiles));
            TR_CHECK(check_chunk_dups(c, name, m, k, ch));
        }
    }
    return TR_OK;
}

enum tr_status feature_spec_read(const char *path, struct feature_spec *fs)
{
    enum tr_status rc = TR_OK;
    memset(fs, 0, sizeof *fs);
    yaml_parser_t parser;
    yaml_document_t doc;
    int have_doc = 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        LOG_ERROR("cannot open feature spec '%s': %s", path, strerror(e));
        /* a path that names nothing is bad input (exit 2), not a failing disk */
        return e == ENOENT || e == ENOTDIR ? TR_ERR_ARG : TR_ERR_IO;
    }
    struct stat st = {0};
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = S_ISREG(st.st_mode) || !st.st_mode ? errno : 0;
        if (S_ISDIR(st.st_mode))
            LOG_ERROR("feature spec '%s' is a directory, not a file", path);
        else
            LOG_ERROR("feature spec '%s' is not a regular file%s%s", path, e ? ": " : "", e ? strerror(e) : "");
        LOG_HINT("--feature_spec names the FeatureSpec yaml file inside --dataset_path (default feature_spec.yaml)");
        fclose(fp);
        return TR_ERR_ARG;
    }
    if (!yaml_parser_initialize(&parser)) {
        fclose(fp);
        return TR_ERR_NOMEM;
    }
    yaml_parser_set_input_file(&parser, fp);
    if (!(fs->path = tr_strdup(path))) {
        rc = TR_ERR_NOMEM;
        goto exit;
    }
    {
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) : 1;
        if (!(fs->dir = tr_malloc(dl + 1))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        memcpy(fs->dir, slash ? path : ".", dl);
        fs->dir[dl] = '\0';
    }
    errno = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        if (parser.error == YAML_READER_ERROR && ferror(fp)) {
            LOG_ERROR("cannot read feature spec '%s': %s", path, strerror(errno ? errno : EIO));
            rc = TR_ERR_IO;
            goto exit;
        }
        LOG_ERROR("feature spec '%s': %s at line %d", path, parser.problem ? parser.problem : "syntax error",
                  (int)parser.problem_mark.line + 1);
        rc = TR_ERR_FORMAT;
        goto exit;
    }
    have_doc = 1;
    struct ctx c = {&doc, path};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = bad(&c, root, "(top level)", "must be a mapping with feature_spec, source_spec and channel_spec");
        goto exit;
    }
    TR_CHECK_GOTO(read_features(&c, map_get(&c, root, "feature_spec"), fs), rc, exit);
    TR_CHECK_GOTO(read_sources(&c, map_get(&c, root, "source_spec"), fs), rc, exit);
    yaml_node_t *ch = map_get(&c, root, "channel_spec");
    if (!ch || ch->type != YAML_MAPPING_NODE) {
        rc = bad(&c, ch ? ch : root, "channel_spec", "must be a mapping of channels");
        goto exit;
    }
    yaml_node_t *cat = map_get(&c, ch, "categorical"), *num = map_get(&c, ch, "numerical"),
                *lab = map_get(&c, ch, "label");
    if (cat)
        TR_CHECK_GOTO(str_list(&c, cat, "channel_spec.categorical", &fs->categorical, &fs->ncategorical), rc, exit);
    if (num)
        TR_CHECK_GOTO(str_list(&c, num, "channel_spec.numerical", &fs->numerical, &fs->nnumerical), rc, exit);
    if (lab)
        TR_CHECK_GOTO(str_list(&c, lab, "channel_spec.label", &fs->label, &fs->nlabel), rc, exit);
    {
        yaml_node_t *const nodes[3] = {cat, num, lab};
        TR_CHECK_GOTO(check_channel_dups(&c, fs, nodes), rc, exit);
    }
    { /* metadata is optional and free-form; vocabulary_rows is read when it is a
       * scalar, format_version must be a version this build knows */
        yaml_node_t *md = map_get(&c, root, "metadata");
        const char *vr = md && md->type == YAML_MAPPING_NODE ? scalar(map_get(&c, md, "vocabulary_rows")) : NULL;
        if (vr && !(fs->vocabulary_rows = tr_strdup(vr))) {
            rc = TR_ERR_NOMEM;
            goto exit;
        }
        yaml_node_t *fv = md && md->type == YAML_MAPPING_NODE ? map_get(&c, md, "format_version") : NULL;
        int32_t ver = 1;
        if (fv && !positive_int(scalar(fv), 1000000, &ver)) {
            rc = bad(&c, fv, "metadata.format_version", "is not a positive integer");
            goto exit;
        }
        if (ver > FEATURE_SPEC_FORMAT_VERSION) {
            LOG_ERROR("feature spec '%s': metadata.format_version %d is newer than this terarec reads (%d) (line %d)",
                      path, (int)ver, FEATURE_SPEC_FORMAT_VERSION, line_of(fv));
            LOG_HINT("read it with the terarec that wrote it, or a newer one");
            rc = TR_ERR_FORMAT;
            goto exit;
        }
        fs->format_version = ver;
        for (int i = 0; i < fs->nfeatures && ver < 2; i++) {
            if (fs->features[i].hotness <= 1 && !fs->features[i].variable)
                continue;
            LOG_ERROR("feature spec '%s': feature '%s' is multi-hot (hotness), which needs metadata.format_version "
                      "2; this spec is version %d",
                      path, fs->features[i].name, (int)ver);
            LOG_HINT("a reader of version 1 would take its ids for one per sample; add format_version: 2 to "
                     "metadata");
            rc = TR_ERR_FORMAT;
            goto exit;
        }
    }
exit:
    if (have_doc)
        yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(fp);
    return rc;
}

void feature_spec_release(struct feature_spec *fs)
{
    for (int i = 0; i < fs->nfeatures; i++) {
        tr_free(fs->features[i].name);
        tr_free(fs->features[i].dtype);
        tr_free(fs->features[i].lengths_dtype);
    }
    tr_free(fs->features);
    for (int i = 0; i < fs->nmappings; i++) {
        struct feature_spec_mapping *m = &fs->mappings[i];
        for (int k = 0; k < m->nchunks; k++) {
            tr_free(m->chunks[k].type);
            free_list(m->chunks[k].features, m->chunks[k].nfeatures);
            free_list(m->chunks[k].files, m->chunks[k].nfiles);
        }
        tr_free(m->chunks);
        tr_free(m->name);
    }
    tr_free(fs->mappings);
    free_list(fs->categorical, fs->ncategorical);
    free_list(fs->numerical, fs->nnumerical);
    free_list(fs->label, fs->nlabel);
    tr_free(fs->vocabulary_rows);
    tr_free(fs->path);
    tr_free(fs->dir);
    memset(fs, 0, sizeof *fs);
}

/* ---- writer ----------------------------------------------------------------- */

static void put_name(FILE *fp, const char *s)
{
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '.' || *p == '/' || *p == '-'))
            plain = 0;
    if (plain && !(s[0] >= '0' && s[0] <= '9'))
        fputs(s, fp);
    else {
        fputc('"', fp);
        for (const char *p = s; *p; p++) {
            if (*p == '"' || *p == '\\')
                fputc('\\', fp);
            fputc(*p, fp);
        }
        fputc('"', fp);
    }
}

static void put_list(FILE *fp, char *const *v, int n)
{
    fputc('[', fp);
    for (int i = 0; i < n; i++) {
        if (i)
            fputs(", ", fp);
        put_name(fp, v[i]);
    }
    fputc(']', fp);
}

enum tr_status feature_spec_write(const struct feature_spec *fs, FILE *fp)
{
    fputs("channel_spec:\n", fp);
    fputs("  categorical: ", fp);
    put_list(fp, fs->categorical, fs->ncategorical);
    fputs("\n  label: ", fp);
    put_list(fp, fs->label, fs->nlabel);
    fputs("\n  numerical: ", fp);
    put_list(fp, fs->numerical, fs->nnumerical);
    fputs("\nfeature_spec:\n", fp);
    int multi = 0;
    for (int i = 0; i < fs->nfeatures; i++) {
        const struct feature_spec_feature *f = &fs->features[i];
        fputs("  ", fp);
        put_name(fp, f->name);
        fputs(": {", fp);
        if (f->cardinality >= 0)
            fprintf(fp, "cardinality: %lld, ", (long long)f->cardinality);
        fputs("dtype: ", fp);
        put_name(fp, f->dtype ? f->dtype : "float32");
        if (f->variable) {
            fputs(", hotness: variable", fp);
            if (f->lengths_dtype) {
                fputs(", lengths_dtype: ", fp);
                put_name(fp, f->lengths_dtype);
            }
            fprintf(fp, ", max_hotness: %d", (int)f->max_hotness);
        } else if (f->hotness > 1) {
            fprintf(fp, ", hotness: %d", (int)f->hotness);
        }
        fputs("}\n", fp);
        multi |= f->variable || f->hotness > 1;
    }
    if (fs->vocabulary_rows || multi) {
        fputs("metadata: {", fp);
        if (multi)
            fprintf(fp, "format_version: %d%s", FEATURE_SPEC_FORMAT_VERSION, fs->vocabulary_rows ? ", " : "");
        if (fs->vocabulary_rows) {
            fputs("vocabulary_rows: ", fp);
            put_name(fp, fs->vocabulary_rows);
        }
        fputs("}\nsource_spec:\n", fp);
    } else {
        fputs("metadata: {}\nsource_spec:\n", fp);
    }
    for (int i = 0; i < fs->nmappings; i++) {
        const struct feature_spec_mapping *m = &fs->mappings[i];
        fputs("  ", fp);
        put_name(fp, m->name);
        fputs(":\n", fp);
        for (int k = 0; k < m->nchunks; k++) {
            fputs("  - features: ", fp);
            put_list(fp, m->chunks[k].features, m->chunks[k].nfeatures);
            fputs("\n    files: ", fp);
            put_list(fp, m->chunks[k].files, m->chunks[k].nfiles);
            fputs("\n    type: ", fp);
            put_name(fp, m->chunks[k].type);
            fputc('\n', fp);
        }
    }
    return ferror(fp) ? TR_ERR_IO : TR_OK;
}

/* ---- the DLRM view ------------------------------------------------------------ */

enum kern_dtype feature_spec_cat_dtype(int64_t cardinality)
{
    if (cardinality < 127)
        return KERN_I8;
    if (cardinality < 32767)
        return KERN_I16;
    return KERN_I32;
}

const char *feature_spec_dtype_name(enum kern_dtype t)
{
    switch (t) {
    case KERN_I8: return "int8";
    case KERN_I16: return "int16";
    case KERN_I32: return "int32";
    case KERN_I64: return "int64";
    case KERN_F16: return "float16";
    case KERN_F32: return "float32";
    case KERN_U8: return "bool";
    case KERN_F64: return "float64";
    case KERN_BF16: return "bfloat16";
    }
    return "?";
}

const char *feature_spec_lengths_dtype(int64_t max_hotness)
{
    return max_hotness < 256 ? "uint8" : max_hotness < 65536 ? "uint16" : "int32";
}

static const struct feature_spec_feature *find_feature(const struct feature_spec *fs, const char *name)
{
    for (int i = 0; i < fs->nfeatures; i++)
        if (!strcmp(fs->features[i].name, name))
            return &fs->features[i];
    return NULL;
}

/* The chunk of mapping m whose first feature is `name`. */
static const struct feature_spec_chunk *find_chunk(const struct feature_spec_mapping *m, const char *name)
{
    for (int k = 0; k < m->nchunks; k++)
        for (int f = 0; f < m->chunks[k].nfeatures; f++)
            if (!strcmp(m->chunks[k].features[f], name))
                return &m->chunks[k];
    return NULL;
}

static enum tr_status join_path(const char *dir, const char *file, char **out)
{
    if (file[0] != '/')
        return tr_file_join_to(dir, file, out);
    *out = tr_strdup(file);
    return *out ? TR_OK : TR_ERR_NOMEM;
}

/* Checks that `ch` is one split_binary file and returns its joined path. */
static enum tr_status chunk_file(const struct feature_spec *fs, const char *split, const struct feature_spec_chunk *ch,
                                 const char *feature, char **out)
{
    if (!ch) {
        LOG_ERROR("feature spec '%s': source_spec.%s has no chunk for feature '%s'", fs->path, split, feature);
        return TR_ERR_FORMAT;
    }
    if (strcmp(ch->type, "split_binary") != 0) {
        LOG_ERROR("feature spec '%s': source_spec.%s chunk of '%s' has type '%s'; only split_binary is supported",
                  fs->path, split, feature, ch->type);
        return TR_ERR_FORMAT;
    }
    if (ch->nfiles != 1) {
        LOG_ERROR("feature spec '%s': source_spec.%s chunk of '%s' lists %d files; exactly one is supported",
                  fs->path, split, feature, ch->nfiles);
        return TR_ERR_FORMAT;
    }
    return join_path(fs->dir, ch->files[0], out);
}

/* Checks that `ch` is split_binary with `nfiles` files and returns the joined path
 * of file k. */
static enum tr_status chunk_file_k(const struct feature_spec *fs, const char *split,
                                   const struct feature_spec_chunk *ch, const char *feature, int nfiles, int k,
                                   char **out)
{
    if (ch && !strcmp(ch->type, "split_binary") && ch->nfiles != nfiles) {
        LOG_ERROR("feature spec '%s': source_spec.%s chunk of '%s' lists %d files; a feature of variable hotness "
                  "has %d: its ids, then its per-sample lengths",
                  fs->path, split, feature, ch->nfiles, nfiles);
        return TR_ERR_FORMAT;
    }
    if (!ch || strcmp(ch->type, "split_binary") != 0 || nfiles == 1) {
        TR_ASSERT(k == 0);
        return chunk_file(fs, split, ch, feature, out);
    }
    return join_path(fs->dir, ch->files[k], out);
}

enum tr_status feature_spec_dlrm_split(const struct feature_spec *fs, const char *split, struct feature_spec_split *out)
{
    enum tr_status rc = TR_OK;
    memset(out, 0, sizeof *out);
    const struct feature_spec_mapping *m = NULL;
    for (int i = 0; i < fs->nmappings; i++)
        if (!strcmp(fs->mappings[i].name, split))
            m = &fs->mappings[i];
    if (!m) {
        LOG_ERROR("feature spec '%s': source_spec has no '%s' split", fs->path, split);
        return TR_ERR_FORMAT;
    }
    if (fs->nlabel != 1) {
        LOG_ERROR("feature spec '%s': channel_spec.label must name exactly one feature (it names %d)", fs->path,
                  fs->nlabel);
        return TR_ERR_FORMAT;
    }
    const struct feature_spec_feature *lf = find_feature(fs, fs->label[0]);
    if (lf && lf->dtype && strcmp(lf->dtype, "bool") != 0) {
        LOG_ERROR("feature spec '%s': label '%s' has dtype '%s'; it must be bool", fs->path, fs->label[0], lf->dtype);
        return TR_ERR_FORMAT;
    }
    const struct feature_spec_chunk *lc = find_chunk(m, fs->label[0]);
    TR_CHECK_GOTO(chunk_file(fs, split, lc, fs->label[0], &out->label_path), rc, fail);
    out->nnumerical = fs->nnumerical;
    if (fs->nnumerical > 0) {
        const struct feature_spec_chunk *nc = find_chunk(m, fs->numerical[0]);
        TR_CHECK_GOTO(chunk_file(fs, split, nc, fs->numerical[0], &out->numerical_path), rc, fail);
        int same = nc->nfeatures == fs->nnumerical;
        for (int i = 0; same && i < fs->nnumerical; i++)
            same = !strcmp(nc->features[i], fs->numerical[i]);
        if (!same) {
            LOG_ERROR("feature spec '%s': source_spec.%s must hold all numerical features in one chunk, in "
                      "channel_spec order",
                      fs->path, split);
            rc = TR_ERR_FORMAT;
            goto fail;
        }
        for (int i = 0; i < fs->nnumerical; i++) {
            const struct feature_spec_feature *f = find_feature(fs, fs->numerical[i]);
            if (f && f->dtype && strcmp(f->dtype, "float16") != 0) {
                LOG_ERROR("feature spec '%s': numerical feature '%s' has dtype '%s'; it must be float16", fs->path,
                          f->name, f->dtype);
                rc = TR_ERR_FORMAT;
                goto fail;
            }
        }
    }
    out->ntables = fs->ncategorical;
    int nc = fs->ncategorical ? fs->ncategorical : 1;
    out->cat_paths = tr_calloc((size_t)nc, sizeof *out->cat_paths);
    out->cat_dtype = tr_calloc((size_t)nc, sizeof *out->cat_dtype);
    out->rows = tr_calloc((size_t)nc, sizeof *out->rows);
    out->hot = tr_calloc((size_t)nc, sizeof *out->hot);
    out->variable = tr_calloc((size_t)nc, sizeof *out->variable);
    out->len_paths = tr_calloc((size_t)nc, sizeof *out->len_paths);
    out->len_size = tr_calloc((size_t)nc, sizeof *out->len_size);
    if (!out->cat_paths || !out->cat_dtype || !out->rows || !out->hot || !out->variable || !out->len_paths ||
        !out->len_size) {
        rc = TR_ERR_NOMEM;
        goto fail;
    }
    /* the label and the numerical features are one value per sample */
    for (int i = 0; i < fs->nfeatures; i++) {
        const struct feature_spec_feature *f = &fs->features[i];
        int cat = 0;
        for (int j = 0; j < fs->ncategorical; j++)
            cat |= !strcmp(fs->categorical[j], f->name);
        if ((f->variable || f->hotness > 1) && !cat) {
            LOG_ERROR("feature spec '%s': feature '%s' has a hotness but is not categorical; only categorical "
                      "features may be multi-hot",
                      fs->path, f->name);
            rc = TR_ERR_FORMAT;
            goto fail;
        }
    }
    for (int i = 0; i < fs->ncategorical; i++) {
        const char *name = fs->categorical[i];
        const struct feature_spec_feature *f = find_feature(fs, name);
        if (!f || f->cardinality < 1) {
            LOG_ERROR("feature spec '%s': categorical feature '%s' needs an integer cardinality in feature_spec",
                      fs->path, name);
            rc = TR_ERR_FORMAT;
            goto fail;
        }
        const struct feature_spec_chunk *ch = find_chunk(m, name);
        const int var = f->variable != 0;
        TR_CHECK_GOTO(chunk_file_k(fs, split, ch, name, var ? 2 : 1, 0, &out->cat_paths[i]), rc, fail);
        if (var)
            TR_CHECK_GOTO(chunk_file_k(fs, split, ch, name, 2, 1, &out->len_paths[i]), rc, fail);
        if (ch->nfeatures != 1) {
            LOG_ERROR("feature spec '%s': categorical feature '%s' must be alone in its chunk", fs->path, name);
            rc = TR_ERR_FORMAT;
            goto fail;
        }
        const char *dt = f->dtype ? f->dtype : "";
        enum kern_dtype t;
        if (!strcmp(dt, "int8"))
            t = KERN_I8;
        else if (!strcmp(dt, "int16"))
            t = KERN_I16;
        else if (!strcmp(dt, "int32"))
            t = KERN_I32;
        else {
            LOG_ERROR("feature spec '%s': categorical feature '%s' has dtype '%s'; it must be int8, int16 or int32",
                      fs->path, name, dt);
            rc = TR_ERR_FORMAT;
            goto fail;
        }
        out->cat_dtype[i] = t;
        out->rows[i] = f->cardinality;
        out->variable[i] = (uint8_t)var;
        out->hot[i] = var ? f->max_hotness : f->hotness > 1 ? f->hotness : 0;
        if (var) {
            const char *ld = f->lengths_dtype ? f->lengths_dtype : feature_spec_lengths_dtype(f->max_hotness);
            out->len_size[i] = !strcmp(ld, "uint8") ? 1 : !strcmp(ld, "uint16") ? 2 : 4;
            if ((out->len_size[i] == 1 && f->max_hotness > 255) ||
                (out->len_size[i] == 2 && f->max_hotness > 65535)) {
                LOG_ERROR("feature spec '%s': categorical feature '%s' has max_hotness %d, which lengths_dtype %s "
                          "cannot hold",
                          fs->path, name, (int)f->max_hotness, ld);
                rc = TR_ERR_FORMAT;
                goto fail;
            }
        }
    }
    return TR_OK;
fail:
    feature_spec_split_release(out);
    return rc;
}

void feature_spec_split_release(struct feature_spec_split *s)
{
    tr_free(s->label_path);
    tr_free(s->numerical_path);
    if (s->cat_paths)
        for (int i = 0; i < s->ntables; i++)
            tr_free(s->cat_paths[i]);
    tr_free(s->cat_paths);
    if (s->len_paths)
        for (int i = 0; i < s->ntables; i++)
            tr_free(s->len_paths[i]);
    tr_free(s->len_paths);
    tr_free(s->cat_dtype);
    tr_free(s->rows);
    tr_free(s->hot);
    tr_free(s->variable);
    tr_free(s->len_size);
    memset(s, 0, sizeof *s);
}
