/* report_header.h - the parts of report.json that say what was measured:
 * the model (path, size, shape, fingerprint), the store (path, documents,
 * how it was opened) and the dataset (files, format, questions per type,
 * passages, renamed and dropped ones, warnings). The machine is
 * eval/machine.h, the runs eval/report.h. */
#ifndef LZ_EVAL_REPORT_HEADER_H
#define LZ_EVAL_REPORT_HEADER_H

#include <jansson.h>

#include "eval/dataset.h"
#include "model/llama.h"
#include "store/store.h"

json_t *lz_eval_model_json(const lz_llama *m, const char *path);
json_t *lz_eval_store_json(lz_store *st, const char *dir, int writable);
json_t *lz_eval_dataset_json(const lz_eval_dataset *d, const char *const *files, int n_files);

/* "2026-12-02T07:41:03Z": now, UTC, into buf */
void lz_eval_utc_now(char *buf, size_t n);

#endif /* LZ_EVAL_REPORT_HEADER_H */
