/* store_internal.h: what the files of ckpt_store/ share beyond store.h: the
 * fault-injection delays the server turns on for tests (TR_CKPT_FAULT_* in
 * server.h). Nothing outside ckpt_store/ includes it; the local-path client never
 * calls it, so its stores never sleep. */
#ifndef TR_CKPT_STORE_INTERNAL_H
#define TR_CKPT_STORE_INTERNAL_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on, in this process: ckpt_fs_commit sleeps commit_delay_ms after the
 * new LATEST's temporary file is written, before it is synced and renamed, and
 * ckpt_fs_chunk_commit sleeps put_delay_ms before checking and renaming the
 * chunk. 0 turns a delay off. Thread-safe (atomics). */
void ckpt_fs_set_fault(int commit_delay_ms, int put_delay_ms);

#ifdef __cplusplus
}
#endif
#endif
