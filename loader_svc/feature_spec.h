/* feature_spec.h: the seed's FeatureSpec (feature_spec.yaml, NVIDIA DLE v2):
 * feature_spec (name -> dtype, cardinality), source_spec (mapping -> chunks of
 * {type, features, files}), channel_spec (categorical, numerical, label) and
 * metadata. Read with libyaml (aliases resolved); written without anchors.
 * Also the DLRM view of a spec: which file holds the labels, the numerical
 * features and each categorical feature of a split. */
#ifndef TR_FEATURE_SPEC_H
#define TR_FEATURE_SPEC_H

#include <stdint.h>
#include <stdio.h>

#include "../common/status.h"
#include "../kernels/kern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest metadata.format_version this build reads and writes: 1 (or absent) is
 * the seed's one-hot layout, 2 adds multi-hot categorical features (hotness). */
#define FEATURE_SPEC_FORMAT_VERSION 2

struct feature_spec_feature {
    char *name;
    char *dtype;         /* numpy name: "bool", "float16", "int8", "int16", "int32", ... */
    int64_t cardinality; /* -1 when absent */
    int32_t hotness;     /* a fixed number of ids per sample: 0 (absent) or 1 one-hot, or more */
    int32_t variable;    /* 1: hotness: variable, 0 to max_hotness ids per sample */
    int32_t max_hotness; /* variable hotness: the most ids a sample holds (0 when absent) */
    char *lengths_dtype; /* variable hotness: numpy name of the per-sample lengths'
                            type ("uint8", "uint16", "int32"); NULL when absent */
};

struct feature_spec_chunk {
    char *type;          /* "split_binary" */
    char **features;     /* (nfeatures) */
    int nfeatures;
    char **files;        /* (nfiles), relative to the spec's directory */
    int nfiles;
};

struct feature_spec_mapping {
    char *name;          /* "train", "test" */
    struct feature_spec_chunk *chunks;
    int nchunks;
};

struct feature_spec {
    char *path;          /* the yaml file read, for messages */
    char *dir;           /* its directory: the base of relative file names */
    struct feature_spec_feature *features;
    int nfeatures;
    struct feature_spec_mapping *mappings;
    int nmappings;
    char **categorical, **numerical, **label; /* channel_spec lists */
    int ncategorical, nnumerical, nlabel;
    char *vocabulary_rows; /* metadata.vocabulary_rows (e.g. "train": the rows the categorical
                              ids were counted on), owned; NULL when absent */
    int format_version;    /* metadata.format_version: 1 when absent; the writer writes 2
                              when a feature is multi-hot, nothing otherwise */
};

/* Reads `path`. On a syntax error or a missing/ill-typed key (a hotness that is
 * neither a positive integer nor "variable", a format_version newer than
 * FEATURE_SPEC_FORMAT_VERSION, a multi-hot feature in a spec of version 1) logs
 * one error naming the file, the key (the feature) and the line, and returns
 * TR_ERR_FORMAT; TR_ERR_IO if
 * the file cannot be read; TR_ERR_NOMEM. *fs is zeroed first and must be released
 * with feature_spec_release whatever the result. */
enum tr_status feature_spec_read(const char *path, struct feature_spec *fs) TR_WUR;
void feature_spec_release(struct feature_spec *fs);

/* Writes fs as YAML to fp (keys in the seed's order: channel_spec, feature_spec,
 * metadata, source_spec; metadata is {} or holds vocabulary_rows when set and
 * format_version 2 when a feature is multi-hot; a feature's hotness, max_hotness
 * and lengths_dtype are written when it is multi-hot). TR_ERR_IO on a write error. */
enum tr_status feature_spec_write(const struct feature_spec *fs, FILE *fp) TR_WUR;

/* The DLRM layout of one mapping (split) of a spec, resolved to paths. */
struct feature_spec_split {
    char *label_path;          /* one byte per sample (bool) */
    char *numerical_path;      /* float16 [N, nnumerical]; NULL when nnumerical == 0 */
    int nnumerical;
    int ntables;
    char **cat_paths;          /* (ntables), channel order: the ids */
    enum kern_dtype *cat_dtype; /* (ntables) KERN_I8 / KERN_I16 / KERN_I32 */
    int64_t *rows;             /* (ntables) rows of each table (the features' cardinality) */
    int32_t *hot;              /* (ntables) batch.h's hotness: 0 one-hot, h > 0 multi-hot with
                                  h ids per sample (fixed) or up to h (variable) */
    uint8_t *variable;         /* (ntables) 1: a variable number of ids per sample */
    char **len_paths;          /* (ntables) variable: the per-sample lengths file, else NULL */
    uint8_t *len_size;         /* (ntables) variable: bytes of a length: 1 uint8, 2 uint16, 4 int32 */
};

/* Checks the seed's DLRM constraints (channels categorical, numerical, label; one
 * bool label; all numerical float16 in one chunk in channel order; each
 * categorical alone in a split_binary chunk, int8/16/32 and an integer
 * cardinality) and the multi-hot ones (a fixed hotness: one file of hotness ids
 * per sample; a variable one: two files, the ids and the per-sample lengths, of
 * uint8, uint16 or int32 below max_hotness; hotness at most BATCH_MAX_HOT) for
 * mapping `split` and fills *out. TR_ERR_FORMAT with one error naming the file and
 * the offending key (the feature) otherwise. Release with
 * feature_spec_split_release. */
enum tr_status feature_spec_dlrm_split(const struct feature_spec *fs, const char *split,
                                       struct feature_spec_split *out) TR_WUR;
void feature_spec_split_release(struct feature_spec_split *s);

/* The seed's dtype for a table of `cardinality` rows: int8 if < 127, int16 if
 * < 32767, else int32 (strict, as numpy iinfo max in the seed, v2 rule). */
enum kern_dtype feature_spec_cat_dtype(int64_t cardinality);
/* numpy name of a dtype ("int8", ...); "?" for others. */
const char *feature_spec_dtype_name(enum kern_dtype t);
/* The lengths' type of a variable feature of max_hotness m when the spec names
 * none: "uint8" if m < 256, "uint16" if m < 65536, else "int32". */
const char *feature_spec_lengths_dtype(int64_t max_hotness);

#ifdef __cplusplus
}
#endif
#endif
