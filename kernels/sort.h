/* sort.h: the one radix sort of the tree, for host arrays of 8- or 16-byte
 * records keyed by the uint64 that starts each record: the embedding update
 * (row << posbits | position keys), the exact AUC (score << 1 | label keys) and
 * `terarec data prepare` (key + payload pairs). Host memory only; there is no
 * device version. */
#ifndef TR_KERN_SORT_H
#define TR_KERN_SORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sorts n records of rec_bytes bytes (8 or 16) stably by bits [lo_bit, hi_bit) of
 * the key, the native-endian uint64 in the first 8 bytes of each record; the other
 * 8 bytes of a 16-byte record are a payload that moves with its key. Records with
 * equal key bits keep their input order. LSD radix, 8 bits a pass; a pass whose
 * digit is the same in every key is skipped; below 48 records an insertion sort.
 *
 * a (n records) holds the input; tmp (n records, not overlapping a) is scratch.
 * Both may be overwritten. Returns whichever of a and tmp holds the sorted
 * records: callers must use the returned pointer, not assume a. Any alignment.
 * 0 <= lo_bit <= hi_bit <= 64; rec_bytes other than 8 or 16 is a bug (aborts).
 * Allocates nothing (16 KiB of stack); single-threaded; thread-safe on distinct
 * buffers. */
void *kern_sort_radix(void *a, void *tmp, int64_t n, size_t rec_bytes, int lo_bit, int hi_bit);

#ifdef __cplusplus
}
#endif
#endif
