/*
 * shm_shrink.h — a tenant that shrinks its shared-memory segment under the
 * daemon, one case per function, each on a daemon of its own running the
 * named backend.
 *
 * The daemon maps a segment at the first request that names it (and, on the
 * isolated backends, its device worker maps it too, at the first large copy);
 * the client can then ftruncate it to nothing. A copy past the new end must be
 * answered BUFFER_MISMATCH, naming the field, to that tenant alone: the daemon
 * keeps serving, the worker keeps its buffers (no fault, no recovery), another
 * tenant's data is untouched and the daemon exits cleanly. The cases: a
 * buffer_write from the segment, a buffer_read into it, a run input in it and
 * a run's output_shm, each after an ftruncate to 0, and copies racing a
 * segment that shrinks and grows again. tests/e2e/shm_shrink_test.c runs them
 * on cpu and cpu-isolated, tests/gpu/shm_shrink_test.c on cuda and
 * cuda-inprocess.
 *
 * Threading: the calling test's thread (the race starts one more, and joins
 * it). Failures are Criterion's, in the calling test.
 */
#ifndef TESSERA_TEST_SHM_SHRINK_H
#define TESSERA_TEST_SHM_SHRINK_H

#include <stdbool.h>

void shrink_buffer_write(const char *backend);
void shrink_buffer_read(const char *backend);
void shrink_run_input(const char *backend);
void shrink_run_output(const char *backend);
/* faults: a shrink can cut a copy short there (the copy is a memcpy, in the
 * daemon or its worker), and one must be seen; CUDA copies large ranges by
 * DMA from the pages its pin holds, which a shrink does not take away. */
void shrink_race(const char *backend, bool faults);

#endif
