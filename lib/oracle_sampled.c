/*
 * oracle_sampled.c — sampled verification (oracle.h, TSR_VERIFY_SAMPLED;
 * docs/arbiter.md, "Verification").
 *
 * A full check runs the reference over every output of every probe, which for
 * an 8192³ matmul is minutes of CPU. Here the candidate still runs at the real
 * shape on full-size probe inputs, but the reference computes only chosen
 * output positions (tsr_ref_run_at): the edge lines, the corners of every
 * edge tile and a seeded grid, where indexing, masking and tail bugs show
 * first. What sampling cannot see (one bad element inside the interior, a
 * special value the random inputs never hold) is covered by running the same
 * candidate in full at a small shape with the real shape's tile residues, on
 * random probes and on special-value probes (pointwise, and epilogues).
 *
 * Probe inputs at the real shape can be gigabytes, so their values come from
 * one hash per element instead of a sequential stream, and are made on every
 * core: the centred sum of the four 16-bit quarters of splitmix64(key + e),
 * scaled to unit variance (nearly normal, bounded by ±3.47), rounded to f32
 * and then to the storage dtype. Still a pure function of (seed, probe,
 * input, element).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "oracle_internal.h"
#include "refexec_internal.h"
#include "tessera/dtype.h"

#define SAMPLED_DEFAULT_PROBES 1
#define SAMPLE_LINE_MAX 65536 /* a longer edge line is sampled, not taken whole */
#define SAMPLE_TILES_MAX 512  /* tiles per dimension whose corners are all taken */
#define SAMPLE_TILES_END 16   /* ...past that, the first and last this many */
#define SAMPLE_IN_EDGE 4      /* seeded coordinates inside the first and last tile */
#define SAMPLE_REDUCED_ROWS 16
#define SAMPLE_QUERY_ROWS 32
#define SAMPLE_GEN_CHUNK 65536
/* Sampled positions of one probe, at most: 32 MiB of them. Whole rows (of
 * attention, of a fused reduction) past it are refused, not allocated. */
#define SAMPLE_POSITIONS_MAX ((size_t)1 << 22)

/* The specials that an f32 accumulator and the f64 reference agree on through a
 * matmul and its epilogue: the list of oracle.c without the values whose
 * products or sums overflow f32 but not f64 (largest finite, a value whose
 * square overflows, 88.5, 89). 17 entries, a prime, as the pointwise list. */
#define EPILOGUE_SPECIALS 17
static const int epilogue_specials[EPILOGUE_SPECIALS] = {0,  1,  2,  3,  4,  9,  10, 11, 12,
                                                         13, 14, 15, 16, 17, 18, 21, 22};

/* Work units per probe element made (a hash, a conversion and a store: what
 * tsr_ref_work counts an element read or written) and per output element
 * filled with NaN before the candidate runs (a memset). */
#define SAMPLED_GEN_WORK TSR_REF_WORK_ELEMENT
#define SAMPLED_FILL_WORK 1.0

/* ---- position sets ---- */

/* Room for one more element of size elem in the array v of n elements and
 * *cap slots: v itself while there is, else v grown to twice its slots (first
 * slots at the start), *cap updated. NULL once the memory ran out, now or
 * before (*oom says so); v is then left as it was. */
static void *sampled_room(void *v, size_t n, size_t *cap, size_t first, size_t elem, bool *oom)
{
    if (*oom)
        return NULL;
    if (n < *cap)
        return v;
    size_t grown_cap = *cap ? *cap * 2 : first;
    void *grown = realloc(v, grown_cap * elem);
    if (grown == NULL)
        *oom = true;
    else
        *cap = grown_cap;
    return grown;
}

typedef struct pos_set {
    uint64_t *v;
    size_t n, cap;
    bool oom;
    bool too_many; /* past SAMPLE_POSITIONS_MAX: the rest was not added */
} pos_set;

/* False once the set stopped taking positions (out of memory, or full). */
static bool pos_open(const pos_set *s)
{
    return !s->oom && !s->too_many;
}

static void pos_add(pos_set *s, uint64_t x)
{
    if (s->n >= SAMPLE_POSITIONS_MAX) {
        s->too_many = true;
        return;
    }
    uint64_t *v = sampled_room(s->v, s->n, &s->cap, 1024, sizeof *v, &s->oom);
    if (v == NULL)
        return;
    s->v = v;
    s->v[s->n++] = x;
}

static int pos_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void pos_unique(pos_set *s)
{
    if (s->n == 0)
        return;
    qsort(s->v, s->n, sizeof *s->v, pos_cmp);
    size_t u = 1;
    for (size_t i = 1; i < s->n; i++)
        if (s->v[i] != s->v[u - 1])
            s->v[u++] = s->v[i];
    s->n = u;
}

/* Coordinates along one dimension, kept in a position set too. */
typedef pos_set coords;

/* The seeded stream of one probe's positions. */
typedef struct sample_rng {
    uint64_t state;
} sample_rng;

static int64_t sample_below(sample_rng *g, int64_t n)
{
    return n <= 1 ? 0 : (int64_t)(tsri_oracle_next(&g->state) % (uint64_t)n);
}

static void coords_tile(coords *c, int64_t i, int64_t d, int64_t t)
{
    pos_add(c, (uint64_t)(i * t));
    pos_add(c, (uint64_t)((i + 1) * t < d ? (i + 1) * t - 1 : d - 1));
}

/* First and last coordinate of every tile of a dimension; past
 * SAMPLE_TILES_MAX tiles, of the first and last SAMPLE_TILES_END and of tiles
 * spread evenly between them. */
static void coords_tiles(coords *c, int64_t d, int64_t t)
{
    int64_t tiles = (d + t - 1) / t;
    if (tiles <= SAMPLE_TILES_MAX) {
        for (int64_t i = 0; i < tiles; i++)
            coords_tile(c, i, d, t);
        return;
    }
    int64_t inner = SAMPLE_TILES_MAX - 2 * SAMPLE_TILES_END;
    int64_t middle = tiles - 2 * SAMPLE_TILES_END;
    for (int64_t i = 0; i < SAMPLE_TILES_END; i++) {
        coords_tile(c, i, d, t);
        coords_tile(c, tiles - 1 - i, d, t);
    }
    for (int64_t k = 0; k < inner; k++)
        coords_tile(c, SAMPLE_TILES_END + k * middle / inner, d, t);
}

/* The boundaries of the first and last tile, and the coordinates across them. */
static void coords_edges(coords *c, int64_t d, int64_t t)
{
    int64_t last = (d - 1) / t * t;
    int64_t list[] = {0, t - 1, t, last - 1, last, d - 1};
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        if (list[i] >= 0 && list[i] < d)
            pos_add(c, (uint64_t)list[i]);
}

/* count seeded coordinates, and SAMPLE_IN_EDGE inside each edge tile. */
static void coords_random(coords *c, int64_t d, int64_t t, int64_t count, sample_rng *g)
{
    int64_t last = (d - 1) / t * t;
    for (int64_t i = 0; i < count; i++)
        pos_add(c, (uint64_t)sample_below(g, d));
    for (int i = 0; i < SAMPLE_IN_EDGE; i++) {
        pos_add(c, (uint64_t)sample_below(g, t < d ? t : d));
        pos_add(c, (uint64_t)(last + sample_below(g, d - last)));
    }
}

/* Every coordinate of the first and last tile. */
static void coords_edge_tiles(coords *c, int64_t d, int64_t t)
{
    int64_t last = (d - 1) / t * t;
    for (int64_t i = 0; i < t && i < d; i++)
        pos_add(c, (uint64_t)i);
    for (int64_t i = last; i < d; i++)
        pos_add(c, (uint64_t)i);
}

static void pos_grid(pos_set *s, const coords *rows, const coords *cols, int64_t n)
{
    for (size_t i = 0; i < rows->n && pos_open(s); i++)
        for (size_t j = 0; j < cols->n && pos_open(s); j++)
            pos_add(s, rows->v[i] * (uint64_t)n + cols->v[j]);
}

static void pos_rows(pos_set *s, const coords *rows, int64_t n)
{
    for (size_t i = 0; i < rows->n && pos_open(s); i++)
        for (int64_t j = 0; j < n && pos_open(s); j++)
            pos_add(s, rows->v[i] * (uint64_t)n + (uint64_t)j);
}

/* Element positions of an m x n output (see tsr_oracle_sample). */
static void sample_elements(pos_set *s, int64_t m, int64_t n, int64_t t, int64_t samples,
                            sample_rng *g)
{
    coords rows_edge = {0}, cols_edge = {0}, rows_tiles = {0}, cols_tiles = {0};
    coords rows_rand = {0}, cols_rand = {0}, rows_line = {0}, cols_line = {0};
    coords ends_r = {0}, ends_c = {0};
    int64_t rr = (int64_t)ceil(sqrt((double)samples));
    rr = rr < m ? rr : m;
    int64_t rc = (samples + rr - 1) / rr;
    rc = rc < n ? rc : n;
    coords_edges(&rows_edge, m, t);
    coords_edges(&cols_edge, n, t);
    coords_tiles(&rows_tiles, m, t);
    coords_tiles(&cols_tiles, n, t);
    coords_random(&rows_rand, m, t, rr, g);
    coords_random(&cols_rand, n, t, rc, g);
    pos_add(&ends_r, 0);
    pos_add(&ends_r, (uint64_t)(m - 1));
    pos_add(&ends_c, 0);
    pos_add(&ends_c, (uint64_t)(n - 1));

    /* The first and last row and column, whole where they are not too long. */
    if (n <= SAMPLE_LINE_MAX) {
        pos_rows(s, &ends_r, n);
    } else {
        coords_edge_tiles(&cols_line, n, t);
        pos_grid(s, &ends_r, &cols_line, n);
        pos_grid(s, &ends_r, &cols_tiles, n);
        pos_grid(s, &ends_r, &cols_rand, n);
    }
    if (m <= SAMPLE_LINE_MAX) {
        for (int64_t i = 0; i < m; i++)
            pos_add(&rows_line, (uint64_t)i);
        pos_grid(s, &rows_line, &ends_c, n);
    } else {
        coords_edge_tiles(&rows_line, m, t);
        pos_grid(s, &rows_line, &ends_c, n);
        pos_grid(s, &rows_tiles, &ends_c, n);
        pos_grid(s, &rows_rand, &ends_c, n);
    }
    /* The corners of every edge tile, and the seeded grid. */
    pos_grid(s, &rows_edge, &cols_tiles, n);
    pos_grid(s, &rows_tiles, &cols_edge, n);
    pos_grid(s, &rows_rand, &cols_rand, n);

    coords *all[] = {&rows_edge, &cols_edge, &rows_tiles, &cols_tiles, &rows_rand,
                     &cols_rand, &rows_line, &cols_line,  &ends_r,     &ends_c};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        s->oom |= all[i]->oom;
        free(all[i]->v);
    }
}

/* Whole rows of an m x n output that a row reduction needs. */
static void sample_reduced_rows(pos_set *s, int64_t m, int64_t n, int64_t t, int64_t samples,
                                sample_rng *g)
{
    coords rows = {0};
    int64_t count = (samples + n - 1) / n;
    count = count > SAMPLE_REDUCED_ROWS ? count : SAMPLE_REDUCED_ROWS;
    coords_edges(&rows, m, t);
    for (int64_t i = 0; i < count && i < m; i++)
        pos_add(&rows, (uint64_t)sample_below(g, m));
    pos_unique(&rows);
    pos_rows(s, &rows, n);
    s->oom |= rows.oom;
    free(rows.v);
}

/* Whole query rows of attention. */
static void sample_query_rows(pos_set *s, const tsr_attention_desc *d, int64_t t, int64_t samples,
                              sample_rng *g)
{
    coords ms = {0}, rows = {0};
    int64_t group = d->heads / d->heads_kv;
    int64_t heads[][2] = {{0, 0},
                          {0, d->heads - 1},
                          {d->batch - 1, 0},
                          {d->batch - 1, d->heads - 1},
                          {0, group - 1},
                          {0, group < d->heads ? group : d->heads - 1}};
    coords_edges(&ms, d->seq_q, t);
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
        for (size_t i = 0; i < ms.n; i++)
            pos_add(&rows, (uint64_t)((heads[h][0] * d->heads + heads[h][1]) * d->seq_q) + ms.v[i]);
    int64_t total = d->batch * d->heads * d->seq_q;
    int64_t count = (samples + d->head_dim_v - 1) / d->head_dim_v;
    count = count > SAMPLE_QUERY_ROWS ? count : SAMPLE_QUERY_ROWS;
    /* A seeded row, then the same query position in the other heads of its
     * kv group: every head's mapping to its kv head is compared, and the
     * reference reads a group's keys and values once for all its heads (the
     * host makes a quarter of them for a grouped decode). */
    for (int64_t i = 0; i < count && i < total;) {
        int64_t row = sample_below(g, total);
        int64_t m = row % d->seq_q, bh = row / d->seq_q;
        int64_t b = bh / d->heads, h0 = bh % d->heads / group * group;
        for (int64_t j = 0; j < group && i < count && i < total; j++, i++)
            pos_add(&rows, (uint64_t)((b * d->heads + h0 + j) * d->seq_q + m));
    }
    pos_unique(&rows);
    pos_rows(s, &rows, d->head_dim_v);
    s->oom |= ms.oom | rows.oom;
    free(ms.v);
    free(rows.v);
}

tsr_status tsr_oracle_sample(const tsr_region *r, int tile, uint64_t seed, int probe, int samples,
                             uint64_t **index, size_t *count, tsr_error *err)
{
    if (r == NULL || index == NULL || count == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "sample: NULL argument");
    *index = NULL;
    *count = 0;
    int64_t t = tile > 0 ? tile : TSR_ORACLE_TILE;
    int64_t want = samples > 0 ? samples : TSR_ORACLE_SAMPLES;
    sample_rng g = {
        tsri_oracle_mix64((seed ? seed : TSRI_ORACLE_DEFAULT_SEED) ^ UINT64_C(0x5a3b1e0f7c2d4e61)) +
        (uint64_t)(uint32_t)probe * UINT64_C(0xd1b54a32d192ed03)};
    pos_set s = {0};
    switch (r->kind) {
    case TSR_KIND_MATMUL:
        sample_elements(&s, r->u.matmul.m, r->u.matmul.n, t, want, &g);
        break;
    case TSR_KIND_GATED:
        sample_elements(&s, r->u.gated.m, r->u.gated.h, t, want, &g);
        break;
    case TSR_KIND_FUSED:
        if (r->u.fused.reduction != TSR_REDUCTION_NONE)
            sample_reduced_rows(&s, r->u.fused.m, r->u.fused.n, t, want, &g);
        else
            sample_elements(&s, r->u.fused.m, r->u.fused.n, t, want, &g);
        break;
    case TSR_KIND_ATTENTION:
        sample_query_rows(&s, &r->u.attention, t, want, &g);
        break;
    case TSR_KIND_POINTWISE: {
        const tsr_pointwise_desc *pw = &r->u.pointwise;
        int64_t n = pw->out_rank > 0 ? pw->out_shape[pw->out_rank - 1] : 1, m = 1;
        for (int d = 0; d + 1 < pw->out_rank; d++)
            m *= pw->out_shape[d];
        sample_elements(&s, m, n, t, want, &g);
        /* A flat kernel's first and last blocks, across rows. */
        int64_t total = m * n, block = 4 * t;
        for (int64_t e = 0; e < block && e < total; e++) {
            pos_add(&s, (uint64_t)e);
            pos_add(&s, (uint64_t)(total - 1 - e));
        }
        break;
    }
    default:
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "sample: unknown region kind %d", (int)r->kind);
    }
    if (s.too_many) {
        free(s.v);
        return tsr_error_set(err, TSR_RESOURCE_EXHAUSTED,
                             "sample: a %s region needs more than %zu sampled positions (its "
                             "whole rows are too long to check by sampling)",
                             tsr_region_kind_name(r->kind), SAMPLE_POSITIONS_MAX);
    }
    if (!s.oom)
        pos_unique(&s);
    if (s.oom) {
        free(s.v);
        return tsr_error_set(err, TSR_NO_MEMORY, "sample: positions of a %s region",
                             tsr_region_kind_name(r->kind));
    }
    *index = s.v;
    *count = s.n;
    return TSR_OK;
}

/* ---- the small shape ---- */

/* D above 2t becomes t + (D mod t), or 2t when t divides D. */
static int64_t small_dim(int64_t d, int64_t t)
{
    if (d <= 2 * t)
        return d;
    return d % t != 0 ? t + d % t : 2 * t;
}

/* seq_q and seq_k cut alike, then seq_q moved by whole tiles until the causal
 * order of the two is the real one (bottom-right masking depends on it). */
static void small_seqs(const tsr_attention_desc *d, int64_t t, int64_t *m, int64_t *n)
{
    *m = small_dim(d->seq_q, t);
    *n = small_dim(d->seq_k, t);
    if (!d->causal)
        return;
    if (d->seq_q < d->seq_k) {
        while (*m >= *n && *m > t)
            *m -= t;
        if (*m >= *n)
            *m = *n > 1 ? *n - 1 : 1;
    } else if (d->seq_q > d->seq_k) {
        while (*m <= *n)
            *m += t;
    } else {
        *m = *n;
    }
}

/* small_dim of each of three dimensions of a region's description. */
static void small_dims3(int64_t *a, int64_t *b, int64_t *c, int64_t t)
{
    *a = small_dim(*a, t);
    *b = small_dim(*b, t);
    *c = small_dim(*c, t);
}

tsr_status tsr_oracle_small_region(const tsr_region *r, int tile, tsr_region *out, tsr_error *err)
{
    if (r == NULL || out == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "small region: NULL argument");
    int64_t t = tile > 0 ? tile : TSR_ORACLE_TILE;
    tsr_status st = tsr_region_copy(out, r, err);
    if (st != TSR_OK)
        return st;
    switch (out->kind) {
    case TSR_KIND_MATMUL:
        small_dims3(&out->u.matmul.m, &out->u.matmul.n, &out->u.matmul.k, t);
        break;
    case TSR_KIND_FUSED:
        small_dims3(&out->u.fused.m, &out->u.fused.n, &out->u.fused.k, t);
        break;
    case TSR_KIND_GATED:
        small_dims3(&out->u.gated.m, &out->u.gated.k, &out->u.gated.h, t);
        break;
    case TSR_KIND_ATTENTION: {
        tsr_attention_desc *d = &out->u.attention;
        int64_t group = d->heads / d->heads_kv;
        d->batch = d->batch < 2 ? d->batch : 2;
        d->heads_kv = d->heads_kv < 2 ? d->heads_kv : 2;
        d->heads = d->heads_kv * group;
        small_seqs(&r->u.attention, t, &d->seq_q, &d->seq_k);
        break;
    }
    case TSR_KIND_POINTWISE: {
        tsr_pointwise_desc *d = &out->u.pointwise;
        /* Inputs are right-aligned with the output; a dimension of 1 stays 1
         * (broadcast), every other takes the output dimension's new size. */
        for (int i = 0; i < d->n_inputs; i++) {
            tsr_pw_input *in = &d->inputs[i];
            for (int k = 0; k < in->rank; k++) {
                int od = d->out_rank - (in->rank - k);
                int64_t size = in->shape[k];
                if (size == 1)
                    continue;
                in->shape[k] = od == d->out_rank - 1 ? small_dim(size, t) : size < 3 ? size : 3;
            }
        }
        break;
    }
    }
    st = tsr_region_validate(out, err);
    if (st != TSR_OK) {
        tsr_region_free(out);
        return tsr_error_prefix(err, "small region");
    }
    return TSR_OK;
}

/* ---- probe inputs ---- */

static int sampled_specials_count(const tsr_region *r)
{
    bool epilogue = r->kind == TSR_KIND_GATED ||
                    (r->kind == TSR_KIND_FUSED && r->u.fused.reduction == TSR_REDUCTION_NONE);
    return epilogue ? EPILOGUE_SPECIALS : 0;
}

/* Probes at the small shape: its full-mode probes (random, and pointwise
 * special values), then the epilogue special-value probes. */
static int sampled_small_count(const tsr_region *small)
{
    return small == NULL ? 0 : tsr_oracle_probe_count(small, 0) + sampled_specials_count(small);
}

/* Allocates and fills the inputs of the real-shape probe `probe`. */
static tsr_status sampled_make_inputs(const tsr_region *r, uint64_t seed, int probe, int threads,
                                      void **inputs, tsr_error *err)
{
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS];
    int n;
    tsr_status st = tsri_oracle_alloc_inputs(r, false, inputs, descs, &n, err);
    if (st != TSR_OK)
        return st;
    for (int i = 0; i < n; i++) {
        int64_t elems = tsr_tensor_desc_elements(&descs[i]);
        tsri_oracle_fill_parallel(descs[i].dtype, inputs[i], 0, (uint64_t)elems,
                                  tsr_oracle_sampled_key(seed, probe, i), threads);
    }
    return TSR_OK;
}

/* ---- the reference on inputs it makes only in part ---- */

/* Full-size inputs of which only the elements the sampled reference reads
 * are made: reserved address space (untouched pages cost no memory and read
 * as zeros), filled where tsri_ref_at_reads names runs of elements. */
typedef struct sparse_inputs {
    const tsr_region *r;
    int n;
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS];
    void *data[TSR_MAX_REGION_INPUTS];
    size_t bytes[TSR_MAX_REGION_INPUTS];
    uint64_t keys[TSR_MAX_REGION_INPUTS];
    int threads;
    /* An input read whole: the memo's copy when it holds one (a reader
     * counted), else whether to offer the one made here. */
    tsr_oracle_memo *memo;
    const void *kept[TSR_MAX_REGION_INPUTS];
    bool offer[TSR_MAX_REGION_INPUTS];
} sparse_inputs;

static void sparse_free(sparse_inputs *s)
{
    for (int i = 0; i < s->n; i++) {
        if (s->data[i] != NULL && s->data[i] != MAP_FAILED)
            munmap(s->data[i], s->bytes[i]);
        tsri_oracle_memo_release(s->memo, s->kept[i]);
    }
}

/* The inputs as the reference reads them: the memo's copies where taken. */
static void sparse_view(const sparse_inputs *s, const void **inputs)
{
    for (int i = 0; i < s->n; i++)
        inputs[i] = s->kept[i] != NULL ? s->kept[i] : s->data[i];
}

static tsr_status sparse_reserve(sparse_inputs *s, const tsr_region *r, uint64_t seed, int probe,
                                 int threads, tsr_error *err)
{
    memset(s, 0, sizeof *s);
    s->r = r;
    s->threads = threads;
    tsr_tensor_desc out;
    s->n = tsr_region_signature(r, s->descs, &out);
    for (int i = 0; i < s->n; i++) {
        uint64_t bytes = tsr_tensor_desc_bytes(&s->descs[i]);
        s->keys[i] = tsr_oracle_sampled_key(seed, probe, i);
        s->bytes[i] = bytes > 0 && bytes <= SIZE_MAX ? (size_t)bytes : 1;
        s->data[i] = bytes <= SIZE_MAX ? mmap(NULL, s->bytes[i], PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                                       : MAP_FAILED;
        if (s->data[i] == MAP_FAILED) {
            s->data[i] = NULL;
            sparse_free(s);
            return tsr_error_set(err, TSR_NO_MEMORY,
                                 "probe: %llu bytes of address space for input '%s'",
                                 (unsigned long long)bytes, s->descs[i].name);
        }
    }
    return TSR_OK;
}

/* The runs to make, collected first and then made in one parallel pass over
 * all of them: made one call at a time, a decode attention's 76 runs of K
 * and V would start their threads 76 times over. */
typedef struct sparse_run {
    int input;
    uint64_t first, count;
    uint64_t end; /* elements of this run and every one before it */
} sparse_run;

typedef struct sparse_runs {
    sparse_inputs *s;
    sparse_run *v;
    size_t n, cap;
    bool oom;
} sparse_runs;

static void sparse_collect(void *ctx, int input, uint64_t first, uint64_t count)
{
    sparse_runs *rs = ctx;
    if (rs->oom || count == 0)
        return;
    /* Single elements next to each other (a B column's rows are not, a
     * pointwise row's are) join one run. */
    if (rs->n > 0 && rs->v[rs->n - 1].input == input &&
        rs->v[rs->n - 1].first + rs->v[rs->n - 1].count == first) {
        rs->v[rs->n - 1].count += count;
        rs->v[rs->n - 1].end += count;
        return;
    }
    sparse_run *v = sampled_room(rs->v, rs->n, &rs->cap, 256, sizeof *v, &rs->oom);
    if (v == NULL)
        return;
    rs->v = v;
    uint64_t before = rs->n > 0 ? rs->v[rs->n - 1].end : 0;
    rs->v[rs->n++] = (sparse_run){input, first, count, before + count};
}

/* Elements [lo, hi) · SAMPLE_GEN_CHUNK of all runs laid end to end. */
static tsr_status sparse_make_range(void *ctx, int64_t lo, int64_t hi)
{
    const sparse_runs *rs = ctx;
    uint64_t total = rs->n > 0 ? rs->v[rs->n - 1].end : 0;
    uint64_t a = (uint64_t)lo * SAMPLE_GEN_CHUNK, b = (uint64_t)hi * SAMPLE_GEN_CHUNK;
    if (b > total)
        b = total;
    /* The run holding element a: the first whose end passes it. */
    size_t r = 0, top = rs->n;
    while (r < top) {
        size_t mid = (r + top) / 2;
        if (rs->v[mid].end <= a)
            r = mid + 1;
        else
            top = mid;
    }
    for (; a < b && r < rs->n; r++) {
        const sparse_run *run = &rs->v[r];
        uint64_t start = run->end - run->count; /* this run's first element laid end to end */
        uint64_t from = a - start, to = (b < run->end ? b : run->end) - start;
        tsr_oracle_sampled_fill(rs->s->descs[run->input].dtype, rs->s->data[run->input],
                                run->first + from, to - from, rs->s->keys[run->input]);
        a = start + to;
    }
    return TSR_OK;
}

static int sparse_run_cmp(const void *a, const void *b)
{
    const sparse_run *x = a, *y = b;
    if (x->input != y->input)
        return x->input < y->input ? -1 : 1;
    return (x->first > y->first) - (x->first < y->first);
}

/* Sorted, with overlapping runs merged (a broadcast input is named once per
 * position that reads it), so that no element is made twice, nor by two
 * threads at once. */
static void sparse_runs_merge(sparse_runs *rs)
{
    if (rs->n == 0)
        return;
    qsort(rs->v, rs->n, sizeof *rs->v, sparse_run_cmp);
    size_t u = 0;
    for (size_t i = 1; i < rs->n; i++) {
        sparse_run *last = &rs->v[u];
        const sparse_run *cur = &rs->v[i];
        if (cur->input == last->input && cur->first <= last->first + last->count) {
            uint64_t end = cur->first + cur->count;
            if (end > last->first + last->count)
                last->count = end - last->first;
        } else {
            rs->v[++u] = *cur;
        }
    }
    rs->n = u + 1;
    uint64_t total = 0;
    for (size_t i = 0; i < rs->n; i++) {
        total += rs->v[i].count;
        rs->v[i].end = total;
    }
}

/* Marks in weight[] the inputs of r that are a product's weights (B, Wu, the
 * bias): their sizes do not follow M, so every shape of the layer reads the
 * same bits. */
static void sparse_weights(const sparse_inputs *s, bool weight[TSR_MAX_REGION_INPUTS])
{
    memset(weight, 0, TSR_MAX_REGION_INPUTS * sizeof *weight);
    tsr_region_kind kind = s->r->kind;
    if (kind != TSR_KIND_MATMUL && kind != TSR_KIND_FUSED && kind != TSR_KIND_GATED)
        return;
    tsri_mm_operands o;
    tsri_mm_operands_of(s->r, (const void *const *)s->data, &o);
    for (int i = 0; i < s->n; i++)
        weight[i] = s->data[i] == o.b || s->data[i] == o.b2 || s->data[i] == o.bias;
}

/* Inputs that the runs cover whole are taken from the memo when it holds
 * them (their runs dropped), else marked to be offered to it once made: a
 * product's weights at once, so that a layer's second shape (often a new
 * kernel variant's first) finds them, the others when the memo has seen
 * them asked for before. */
static void sparse_take_kept(sparse_inputs *s, sparse_runs *rs)
{
    if (s->memo == NULL)
        return;
    uint64_t covered[TSR_MAX_REGION_INPUTS] = {0};
    bool weight[TSR_MAX_REGION_INPUTS];
    sparse_weights(s, weight);
    for (size_t i = 0; i < rs->n; i++)
        covered[rs->v[i].input] += rs->v[i].count;
    for (int i = 0; i < s->n; i++) {
        uint64_t n = (uint64_t)tsr_tensor_desc_elements(&s->descs[i]);
        if (n == 0 || covered[i] != n)
            continue;
        s->kept[i] = tsri_oracle_memo_get(s->memo, s->keys[i], s->descs[i].dtype, n, &s->offer[i]);
        if (s->kept[i] == NULL && weight[i])
            s->offer[i] = true;
    }
    size_t u = 0;
    for (size_t i = 0; i < rs->n; i++)
        if (s->kept[rs->v[i].input] == NULL)
            rs->v[u++] = rs->v[i];
    rs->n = u;
    uint64_t total = 0;
    for (size_t i = 0; i < rs->n; i++) {
        total += rs->v[i].count;
        rs->v[i].end = total;
    }
}

static tsr_status sparse_make(sparse_inputs *s, const tsr_region *r, const uint64_t *index,
                              size_t count)
{
    sparse_runs rs = {.s = s};
    tsr_status st = tsri_ref_at_reads(r, index, count, sparse_collect, &rs);
    if (st == TSR_OK && rs.oom)
        st = TSR_NO_MEMORY;
    if (st == TSR_OK) {
        sparse_runs_merge(&rs);
        sparse_take_kept(s, &rs);
    }
    if (st == TSR_OK && rs.n > 0) {
        int64_t chunks = (int64_t)((rs.v[rs.n - 1].end + SAMPLE_GEN_CHUNK - 1) / SAMPLE_GEN_CHUNK);
        st = tsri_ref_parallel(chunks < s->threads ? (int)chunks : s->threads, chunks,
                               sparse_make_range, &rs);
    }
    for (int i = 0; st == TSR_OK && i < s->n; i++)
        if (s->offer[i])
            tsri_oracle_memo_put(s->memo, s->keys[i], s->descs[i].dtype,
                                 (uint64_t)tsr_tensor_desc_elements(&s->descs[i]), s->data[i],
                                 s->bytes[i]);
    free(rs.v);
    return st;
}

static void sparse_count(void *ctx, int input, uint64_t first, uint64_t count)
{
    (void)input;
    (void)first;
    *(double *)ctx += (double)count;
}

tsr_status tsr_oracle_sampled_reference(const tsr_region *r, uint64_t seed, int probe,
                                        const uint64_t *index, size_t count, void *out, int threads,
                                        tsr_error *err)
{
    return tsri_oracle_sampled_reference(r, seed, probe, index, count, out, threads, NULL, err);
}

tsr_status tsri_oracle_sampled_reference(const tsr_region *r, uint64_t seed, int probe,
                                         const uint64_t *index, size_t count, void *out,
                                         int threads, tsr_oracle_memo *memo, tsr_error *err)
{
    if (r == NULL || (count > 0 && (index == NULL || out == NULL)))
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "sampled reference: NULL argument");
    if ((unsigned)r->kind >= TSR_KIND_COUNT)
        return tsr_error_set(err, TSR_UNKNOWN_KIND, "sampled reference: unknown region kind %d",
                             (int)r->kind);
    sparse_inputs s;
    tsr_status st = sparse_reserve(&s, r, seed ? seed : TSRI_ORACLE_DEFAULT_SEED, probe,
                                   tsri_ref_threads(threads), err);
    if (st != TSR_OK)
        return st;
    s.memo = memo;
    /* The positions are checked before anything is made from them
     * (tsr_ref_run_at checks them again, with the same messages). */
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], o;
    tsr_region_signature(r, in, &o);
    uint64_t total = (uint64_t)tsr_tensor_desc_elements(&o);
    for (size_t t = 0; st == TSR_OK && t < count; t++) {
        if (index[t] >= total)
            st = tsr_error_set(err, TSR_INVALID_ARGUMENT,
                               "index: position %llu is past the %llu outputs of the region",
                               (unsigned long long)index[t], (unsigned long long)total);
        else if (t > 0 && index[t] <= index[t - 1])
            st = tsr_error_set(err, TSR_INVALID_ARGUMENT,
                               "index: positions must ascend, [%zu] = %llu after %llu", t,
                               (unsigned long long)index[t], (unsigned long long)index[t - 1]);
    }
    if (st == TSR_OK && sparse_make(&s, r, index, count) != TSR_OK)
        st = tsr_error_set(err, TSR_NO_MEMORY, "sampled reference: scratch for %zu positions",
                           count);
    const void *inputs[TSR_MAX_REGION_INPUTS];
    sparse_view(&s, inputs);
    if (st == TSR_OK)
        st = tsr_ref_run_at(r, inputs, index, count, out, threads, err);
    sparse_free(&s);
    return st;
}

tsr_status tsr_oracle_make_sampled_probe(const tsr_region *r, uint64_t seed, int index, int threads,
                                         void **inputs, tsr_error *err)
{
    if (r == NULL || inputs == NULL)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "probe: NULL argument");
    return sampled_make_inputs(r, seed, index, tsri_ref_threads(threads), inputs, err);
}

/* Epilogue probe q at the small shape: row i of A holds one special value in
 * column 0 and zeros elsewhere, B's row 0 is ±1 (Wu's row 0 specials) and its
 * other rows zero, so that every output of row i is ±prologue(special) before
 * the epilogue; bias and residual cycle through the specials too. */
static tsr_status sampled_epilogue_probe(const tsr_region *r, int q, void **inputs, tsr_error *err)
{
    double all[TSRI_ORACLE_SPECIALS], list[EPILOGUE_SPECIALS];
    tsri_oracle_specials(r->dtype, all);
    for (int i = 0; i < EPILOGUE_SPECIALS; i++)
        list[i] = all[epilogue_specials[i]];
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS];
    int n;
    tsr_status st = tsri_oracle_alloc_inputs(r, true, inputs, descs, &n, err);
    if (st != TSR_OK)
        return st;
    tsri_mm_operands o;
    tsri_mm_operands_of(r, (const void *const *)inputs, &o);
    tsr_dtype dt = r->dtype;
    /* calloc's zero bytes are +0 in every storage dtype. */
    for (int64_t i = 0; i < o.m; i++)
        tsr_dtype_store(dt, (void *)o.a, (size_t)(i * o.k), list[(i + q) % EPILOGUE_SPECIALS]);
    for (int64_t j = 0; j < o.n; j++) {
        tsr_dtype_store(dt, (void *)o.b, (size_t)j, j % 2 == 0 ? 1.0 : -1.0);
        if (o.b2 != NULL)
            tsr_dtype_store(dt, (void *)o.b2, (size_t)j, list[(j + 3 * q) % EPILOGUE_SPECIALS]);
        if (o.bias != NULL)
            tsr_dtype_store(dt, (void *)o.bias, (size_t)j, list[(j + 5 * q) % EPILOGUE_SPECIALS]);
    }
    if (o.residual != NULL)
        for (int64_t e = 0; e < o.m * o.n; e++)
            tsr_dtype_store(dt, (void *)o.residual, (size_t)e,
                            list[(e + 7 * q) % EPILOGUE_SPECIALS]);
    return TSR_OK;
}

static tsr_status sampled_small_inputs(const tsr_region *small, uint64_t seed, int q, void **inputs,
                                       tsr_error *err)
{
    int base = tsr_oracle_probe_count(small, 0);
    if (q < base)
        return tsr_oracle_make_probe(small, seed, q, 0, inputs, err);
    return sampled_epilogue_probe(small, q - base, inputs, err);
}

/* ---- cost ---- */

/* Making a probe's inputs and filling its output. */
static double sampled_probe_work(const tsr_region *r)
{
    tsr_tensor_desc in[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, in, &out);
    double work = SAMPLED_FILL_WORK * (double)tsr_tensor_desc_elements(&out);
    for (int i = 0; i < n; i++)
        work += SAMPLED_GEN_WORK * (double)tsr_tensor_desc_elements(&in[i]);
    return work;
}

void tsr_oracle_cost_of(const tsr_region *r, const tsr_oracle_options *opts, tsr_oracle_cost *out)
{
    tsr_oracle_options o = {0};
    if (opts != NULL)
        o = *opts;
    memset(out, 0, sizeof *out);
    if (o.method != TSR_VERIFY_SAMPLED) {
        out->real_probes = tsr_oracle_probe_count(r, o.random_probes);
        out->work = out->real_probes * tsr_ref_work(r);
        return;
    }
    out->real_probes = o.random_probes > 0 ? o.random_probes : SAMPLED_DEFAULT_PROBES;
    out->small_probes = sampled_small_count(o.small);
    /* Every probe at the real shape samples as many positions, but for a few
     * seeded ones that may coincide: the first stands for all of them. */
    uint64_t *index = NULL;
    size_t count = 0;
    if (tsr_oracle_sample(r, o.tile, o.seed, 0, o.samples, &index, &count, NULL) != TSR_OK) {
        out->work = INFINITY;
        return;
    }
    /* The comparison reads both sides of every sampled position. A candidate
     * that makes its own inputs leaves the host only the elements the
     * reference reads to make. */
    double made = 0;
    if (o.run_keyed != NULL && tsri_ref_at_reads(r, index, count, sparse_count, &made) != TSR_OK)
        made = INFINITY;
    double probe = (o.run_keyed != NULL ? SAMPLED_GEN_WORK * made : sampled_probe_work(r)) +
                   tsr_ref_work_at(r, index, count) + TSR_REF_WORK_ELEMENT * 2.0 * (double)count;
    free(index);
    out->work = (double)out->real_probes * probe;
    if (o.small != NULL)
        out->work += out->small_probes * (tsr_ref_work(o.small) + sampled_probe_work(o.small));
}

/* ---- verify ---- */

static void fill_nan_span(void *data, uint64_t a, uint64_t b)
{
    /* All-ones bytes are a NaN in every storage dtype (see oracle.c). */
    memset((unsigned char *)data + a, 0xff, (size_t)(b - a));
}

static void sampled_fill_nan(void *data, size_t bytes, int threads)
{
    tsri_ref_parallel_chunks(threads, bytes, SAMPLE_GEN_CHUNK, fill_nan_span, data);
}

static tsr_status sampled_candidate_failed(tsr_verdict *v, int probe, const char *where,
                                           tsr_status st, const tsr_error *cerr, tsr_error *err)
{
    const char *msg = cerr->code == st && cerr->message[0] ? cerr->message : tsr_strerror(st);
    v->pass = false;
    snprintf(v->reason, sizeof v->reason, "candidate failed on probe %d%s: %s: %.100s", probe,
             where, tsr_status_name(st), msg);
    return tsr_error_set(err, st, "candidate failed on probe %d%s: %s", probe, where, msg);
}

/* Runs the candidate on in into got; a failure fails v and err with the
 * candidate's own message, where saying which shape failed. */
static tsr_status sampled_candidate_run(tsr_candidate_run_fn run, void *ctx, const tsr_region *r,
                                        const void *const *in, void *got, tsr_verdict *v, int probe,
                                        const char *where, tsr_error *err)
{
    tsr_error cerr;
    tsr_error_clear(&cerr);
    tsr_status st = run(ctx, r, in, got, &cerr);
    if (st != TSR_OK)
        sampled_candidate_failed(v, probe, where, st, &cerr, err);
    return st;
}

/* The reference's failure on a probe (where: which shape), in err and v's
 * reason. */
static void sampled_reference_failed(tsr_verdict *v, int probe, const char *where, tsr_error *err)
{
    tsr_error_prefix(err, "reference on probe %d%s", probe, where);
    snprintf(v->reason, sizeof v->reason, "reference failed on probe %d%s", probe, where);
}

/* One probe at the real shape: the candidate in full, the reference at the
 * sampled positions. */
static tsr_status sampled_real_probe(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                                     const tsr_oracle_options *o, int probe, int threads, void *got,
                                     uint64_t out_bytes, tsr_verdict *v, tsr_error *err)
{
    void *inputs[TSR_MAX_REGION_INPUTS] = {0};
    uint64_t *index = NULL;
    size_t count = 0;
    size_t size = tsr_dtype_size(r->out_dtype);
    void *want = NULL, *sampled = NULL;
    tsr_status st = sampled_make_inputs(r, o->seed, probe, threads, inputs, err);
    if (st == TSR_OK)
        st = tsr_oracle_sample(r, o->tile, o->seed, probe, o->samples, &index, &count, err);
    if (st == TSR_OK &&
        ((want = malloc(count * size + 1)) == NULL || (sampled = malloc(count * size + 1)) == NULL))
        st = tsr_error_set(err, TSR_NO_MEMORY, "verify: %zu sampled outputs", count);
    const void *const *in = (const void *const *)inputs;
    if (st == TSR_OK) {
        st = tsr_ref_run_at(r, in, index, count, want, o->ref_threads, err);
        if (st != TSR_OK)
            sampled_reference_failed(v, probe, "", err);
    }
    if (st == TSR_OK) {
        sampled_fill_nan(got, (size_t)out_bytes, threads);
        st = sampled_candidate_run(run, ctx, r, in, got, v, probe, "", err);
    }
    if (st == TSR_OK) {
        for (size_t t = 0; t < count; t++)
            memcpy((char *)sampled + t * size, (const char *)got + index[t] * size, size);
        tsri_oracle_compare(v, probe, r->out_dtype, sampled, want, count, index, "");
        v->sampled_elements += count;
    }
    if (inputs[0] != NULL)
        tsr_oracle_free_probe(r, inputs);
    free(index);
    free(want);
    free(sampled);
    return st;
}

/* One probe at the real shape, where the candidate makes its own inputs
 * from the keys and returns only the sampled outputs: the host makes just
 * the input elements that the reference reads. */
static tsr_status sampled_keyed_probe(const tsr_region *r, void *ctx, const tsr_oracle_options *o,
                                      int probe, tsr_verdict *v, tsr_error *err)
{
    uint64_t *index = NULL, keys[TSR_MAX_REGION_INPUTS];
    size_t count = 0;
    size_t size = tsr_dtype_size(r->out_dtype);
    void *want = NULL, *got = NULL;
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], out;
    int n = tsr_region_signature(r, descs, &out);
    for (int i = 0; i < n; i++)
        keys[i] = tsr_oracle_sampled_key(o->seed, probe, i);
    tsr_status st = tsr_oracle_sample(r, o->tile, o->seed, probe, o->samples, &index, &count, err);
    if (st == TSR_OK &&
        ((want = malloc(count * size + 1)) == NULL || (got = malloc(count * size + 1)) == NULL))
        st = tsr_error_set(err, TSR_NO_MEMORY, "verify: %zu sampled outputs", count);
    if (st == TSR_OK) {
        st = tsri_oracle_sampled_reference(r, o->seed, probe, index, count, want, o->ref_threads,
                                           o->memo, err);
        if (st != TSR_OK)
            sampled_reference_failed(v, probe, "", err);
    }
    if (st == TSR_OK) {
        /* All-ones bytes (NaN) where the candidate writes nothing, as below. */
        memset(got, 0xff, count * size);
        tsr_error cerr;
        tsr_error_clear(&cerr);
        st = o->run_keyed(ctx, r, keys, index, count, got, &cerr);
        if (st != TSR_OK)
            sampled_candidate_failed(v, probe, "", st, &cerr, err);
    }
    if (st == TSR_OK) {
        tsri_oracle_compare(v, probe, r->out_dtype, got, want, count, index, "");
        v->sampled_elements += count;
    }
    free(index);
    free(want);
    free(got);
    return st;
}

/* A small-shape probe's inputs and reference output, made ahead of its run. */
typedef struct small_probe {
    void *inputs[TSR_MAX_REGION_INPUTS];
    void *want;
    tsr_status status; /* of making them; err says why */
    bool reference_failed;
    tsr_error err;
} small_probe;

typedef struct small_wave {
    const tsr_region *small;
    uint64_t seed;
    int first;       /* the wave's first probe */
    int ref_threads; /* each probe's reference */
    size_t out_bytes;
    small_probe *probes;
} small_wave;

/* Makes probes [lo, hi) of a wave, each on one thread that shares the cores
 * left over with its reference: a small shape's reference divides poorly over
 * many threads, so the probes are shared out first. */
static tsr_status small_make_range(void *ctx, int64_t lo, int64_t hi)
{
    const small_wave *w = ctx;
    for (int64_t i = lo; i < hi; i++) {
        small_probe *p = &w->probes[i];
        tsr_error_clear(&p->err);
        p->want = malloc(w->out_bytes + 1);
        p->status =
            p->want != NULL
                ? sampled_small_inputs(w->small, w->seed, w->first + (int)i, p->inputs, &p->err)
                : tsr_error_set(&p->err, TSR_NO_MEMORY, "verify: small-shape output");
        if (p->status == TSR_OK) {
            p->status = tsr_ref_run(w->small, (const void *const *)p->inputs, p->want,
                                    w->ref_threads, &p->err);
            p->reference_failed = p->status != TSR_OK;
        }
    }
    return TSR_OK;
}

static void small_probe_free(const tsr_region *small, small_probe *p)
{
    if (p->inputs[0] != NULL)
        tsr_oracle_free_probe(small, p->inputs);
    free(p->want);
    memset(p, 0, sizeof *p);
}

/* The small-shape probes: made and referenced in waves of up to `threads`
 * probes side by side (a wave smaller than the cores shares them: two
 * attention probes on 16 cores take 8 each), then run and compared one by one
 * in order, as probes first + q. */
static tsr_status sampled_small_probes(const tsr_region *small, tsr_candidate_run_fn run, void *ctx,
                                       const tsr_oracle_options *o, int first, int threads,
                                       tsr_verdict *v, tsr_error *err)
{
    int count = sampled_small_count(small);
    if (count == 0)
        return TSR_OK;
    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], out;
    tsr_region_signature(small, descs, &out);
    size_t bytes = (size_t)tsr_tensor_desc_bytes(&out);
    int wave = threads < count ? threads : count;
    small_probe *probes = calloc((size_t)wave, sizeof *probes);
    void *got = malloc(bytes + 1);
    if (probes == NULL || got == NULL) {
        free(probes);
        free(got);
        return tsr_error_set(err, TSR_NO_MEMORY, "verify: small-shape probes");
    }
    tsr_status st = TSR_OK;
    for (int q0 = 0; q0 < count && st == TSR_OK; q0 += wave) {
        int n = count - q0 < wave ? count - q0 : wave;
        small_wave w = {.small = small,
                        .seed = o->seed,
                        .first = q0,
                        .ref_threads = threads / n > 1 ? threads / n : 1,
                        .out_bytes = bytes,
                        .probes = probes};
        tsri_ref_parallel(n, n, small_make_range, &w);
        for (int i = 0; i < n && st == TSR_OK; i++) {
            small_probe *p = &probes[i];
            int probe = first + q0 + i;
            st = p->status;
            if (st != TSR_OK) {
                if (err != NULL)
                    *err = p->err;
                if (p->reference_failed)
                    sampled_reference_failed(v, probe, " (small shape)", err);
                break;
            }
            memset(got, 0xff, bytes);
            st = sampled_candidate_run(run, ctx, small, (const void *const *)p->inputs, got, v,
                                       probe, ", small shape", err);
            if (st == TSR_OK) {
                tsri_oracle_compare(v, probe, small->out_dtype, got, p->want,
                                    (size_t)tsr_tensor_desc_elements(&out), NULL, ", small shape");
                v->small_probes++;
            }
        }
        for (int i = 0; i < n; i++)
            small_probe_free(small, &probes[i]);
    }
    free(probes);
    free(got);
    return st;
}

tsr_status tsri_oracle_verify_sampled(const tsr_region *r, tsr_candidate_run_fn run, void *ctx,
                                      const tsr_oracle_options *opts, tsr_verdict *v,
                                      tsr_error *err)
{
    tsr_oracle_options o = *opts;
    if (o.random_probes <= 0)
        o.random_probes = SAMPLED_DEFAULT_PROBES;
    tsr_verdict_init(v, o.bound, r->out_dtype);
    v->method = TSR_VERIFY_SAMPLED;
    int threads = tsri_ref_threads(o.ref_threads);

    tsr_tensor_desc descs[TSR_MAX_REGION_INPUTS], out;
    (void)tsr_region_signature(r, descs, &out);
    uint64_t out_bytes = tsr_tensor_desc_bytes(&out);
    /* A keyed candidate returns only the sampled outputs. */
    void *got = o.run_keyed != NULL     ? NULL
                : out_bytes <= SIZE_MAX ? malloc((size_t)out_bytes + 1)
                                        : NULL;
    if (got == NULL && o.run_keyed == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "verify: output of %llu bytes",
                             (unsigned long long)out_bytes);
    tsr_status st = TSR_OK;
    for (int p = 0; p < o.random_probes && st == TSR_OK; p++)
        st = o.run_keyed != NULL
                 ? sampled_keyed_probe(r, ctx, &o, p, v, err)
                 : sampled_real_probe(r, run, ctx, &o, p, threads, got, out_bytes, v, err);
    free(got);
    if (st == TSR_OK)
        st = sampled_small_probes(o.small, run, ctx, &o, o.random_probes, threads, v, err);
    if (st != TSR_OK)
        v->pass = false;
    return st;
}
