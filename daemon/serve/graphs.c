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

tsrd_graph *tsrd_graphs_find(tsrd_session *s, const uint64_t *key, size_t n)
{
    for (struct tsrd_graph_cache **p = &s->graphs; *p != NULL; p = &(*p)->next) {
        struct tsrd_graph_cache *g = *p;
        if (g->n_key == n && memcmp(g->key, key, n * sizeof *key) == 0) {
            *p = g->next;
            g->next = s->graphs;
            s->graphs = g;
            return g->graph;
        }
    }
    return NULL;
}

tsr_status tsrd_graphs_keep(tsrd_daemon *d, tsrd_session *s, uint64_t *key, size_t n,
                            tsrd_graph *graph, tsr_error *err)
{
    struct tsrd_graph_cache *g = calloc(1, sizeof *g);
    if (g == NULL) {
        d->bops->graph->graph_destroy(d->backend, graph);
        free(key);
        return tsr_error_set(err, TSR_NO_MEMORY, "out of memory");
    }
    g->key = key;
    g->n_key = n;
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
