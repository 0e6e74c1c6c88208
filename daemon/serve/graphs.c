/*
 * graphs.c — a session's captured launch sequences: a short most-recently-used
 * list, since a client replays a handful of sequences at most.
 */
#include "serve/graphs.h"

#include <stdlib.h>
#include <string.h>

struct tsrd_graph_cache {
    struct tsrd_graph_cache *next;
    size_t n_key;
    uint64_t *key; /* per launch: kernel, inputs..., output */
    size_t launches;
    tsrd_graph *graph;
};

static void graphs_free_list(tsrd_daemon *d, struct tsrd_graph_cache *g)
{
    while (g != NULL) {
        struct tsrd_graph_cache *next = g->next;
        d->bops->graph->graph_destroy(d->backend, g->graph);
        free(g->key);
        free(g);
        g = next;
    }
}

tsrd_graph *tsrd_graphs_match(tsrd_session *s, const uint64_t *seq, size_t n_seq, size_t *launches)
{
    struct tsrd_graph_cache **best = NULL;
    for (struct tsrd_graph_cache **p = &s->graphs; *p != NULL; p = &(*p)->next) {
        struct tsrd_graph_cache *g = *p;
        if (g->n_key <= n_seq && memcmp(g->key, seq, g->n_key * sizeof *seq) == 0 &&
            (best == NULL || g->n_key > (*best)->n_key))
            best = p;
    }
    if (best == NULL)
        return NULL;
    struct tsrd_graph_cache *g = *best;
    *best = g->next;
    g->next = s->graphs;
    s->graphs = g;
    *launches = g->launches;
    return g->graph;
}

tsr_status tsrd_graphs_keep(tsrd_daemon *d, tsrd_session *s, uint64_t *key, size_t n_key,
                            size_t launches, tsrd_graph *graph, tsr_error *err)
{
    struct tsrd_graph_cache *g = calloc(1, sizeof *g);
    if (g == NULL) {
        d->bops->graph->graph_destroy(d->backend, graph);
        free(key);
        return tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
    }
    g->key = key;
    g->n_key = n_key;
    g->launches = launches;
    g->graph = graph;
    g->next = s->graphs;
    s->graphs = g;
    int count = 0;
    for (struct tsrd_graph_cache **p = &s->graphs; *p != NULL; p = &(*p)->next) {
        if (++count > TSRD_BATCH_GRAPHS) {
            graphs_free_list(d, *p);
            *p = NULL;
            break;
        }
    }
    return TSR_OK;
}

void tsrd_graphs_release(tsrd_daemon *d, tsrd_session *s)
{
    graphs_free_list(d, s->graphs);
    s->graphs = NULL;
}
