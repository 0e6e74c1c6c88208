/*
 * npy.c — NumPy .npy files (npy.h): a strict parser for the header dictionary,
 * the three float element types, and an atomic writer.
 *
 * The header is a Python dict literal. Rather than a general Python parser, this
 * reads exactly the grammar numpy writes (keys 'descr', 'fortran_order' and
 * 'shape', any order, single or double quotes, optional trailing comma, spaces)
 * and rejects everything else: a file from an untrusted caller must fail with a
 * message, never be guessed at. Every size is checked for overflow before it is
 * used.
 */
#include "tessera/npy.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/random.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tessera/dtype.h"

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

struct npy_cursor {
    const char *p;
    const char *end;
};

static void npy_skip_space(struct npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n'))
        c->p++;
}

static bool npy_accept(struct npy_cursor *c, char ch)
{
    npy_skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string into buf; false when malformed or longer than cap - 1. */
static bool npy_string(struct npy_cursor *c, char *buf, size_t cap)
{
    npy_skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= cap)
            return false;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return false;
    c->p++;
    buf[n] = '\0';
    return true;
}

static bool npy_word(struct npy_cursor *c, const char *word)
{
    npy_skip_space(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

static tsr_status npy_shape(struct npy_cursor *c, tsr_npy *out, tsr_error *err)
{
    if (!npy_accept(c, '('))
        return tsr_error_set(err, TSR_CORRUPT, "npy header: 'shape' is not a tuple");
    out->rank = 0;
    for (;;) {
        if (npy_accept(c, ')'))
            return TSR_OK;
        npy_skip_space(c);
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return tsr_error_set(err, TSR_CORRUPT, "npy header: bad 'shape' entry");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10)
                return tsr_error_set(err, TSR_CORRUPT, "npy header: 'shape' entry overflows");
            v = v * 10 + (*c->p++ - '0');
        }
        (void)npy_accept(c, 'L'); /* Python 2 long suffix */
        npy_skip_space(c);
        if (c->p < c->end && *c->p != ',' && *c->p != ')')
            return tsr_error_set(err, TSR_CORRUPT,
                                 "npy header: 'shape' entries must be whole numbers");
        if (out->rank >= TSR_MAX_RANK)
            return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "npy: rank above %d unsupported",
                                 TSR_MAX_RANK);
        out->shape[out->rank++] = v;
        if (!npy_accept(c, ',')) {
            if (!npy_accept(c, ')'))
                return tsr_error_set(err, TSR_CORRUPT, "npy header: unterminated 'shape'");
            return TSR_OK;
        }
    }
}

static tsr_status npy_header(const char *text, size_t len, tsr_npy *out, tsr_error *err)
{
    struct npy_cursor c = {text, text + len};
    bool seen_descr = false, seen_order = false, seen_shape = false;
    if (!npy_accept(&c, '{'))
        return tsr_error_set(err, TSR_CORRUPT, "npy header: not a dictionary");
    while (!npy_accept(&c, '}')) {
        char key[32];
        if (!npy_string(&c, key, sizeof key) || !npy_accept(&c, ':'))
            return tsr_error_set(err, TSR_CORRUPT, "npy header: malformed key");
        if (strcmp(key, "descr") == 0 && !seen_descr) {
            char descr[32];
            seen_descr = true;
            if (!npy_string(&c, descr, sizeof descr))
                return tsr_error_set(err, TSR_CORRUPT, "npy header: 'descr' is not a string");
            if (strcmp(descr, "<f4") == 0)
                out->type = TSR_NPY_F32;
            else if (strcmp(descr, "<f2") == 0)
                out->type = TSR_NPY_F16;
            else if (strcmp(descr, "<f8") == 0)
                out->type = TSR_NPY_F64;
            else
                return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                     "npy: element type '%s' unsupported (need <f4, <f2, <f8)",
                                     descr);
        } else if (strcmp(key, "fortran_order") == 0 && !seen_order) {
            seen_order = true;
            if (npy_word(&c, "True"))
                return tsr_error_set(err, TSR_BAD_ATTRIBUTE,
                                     "npy: fortran_order True unsupported (C order only)");
            if (!npy_word(&c, "False"))
                return tsr_error_set(err, TSR_CORRUPT, "npy header: bad 'fortran_order'");
        } else if (strcmp(key, "shape") == 0 && !seen_shape) {
            seen_shape = true;
            tsr_status st = npy_shape(&c, out, err);
            if (st != TSR_OK)
                return st;
        } else {
            return tsr_error_set(err, TSR_CORRUPT, "npy header: unexpected key '%s'", key);
        }
        if (!npy_accept(&c, ',')) {
            if (!npy_accept(&c, '}'))
                return tsr_error_set(err, TSR_CORRUPT, "npy header: expected ',' or '}'");
            break;
        }
    }
    if (!seen_descr || !seen_order || !seen_shape)
        return tsr_error_set(err, TSR_CORRUPT, "npy header: missing '%s'",
                             !seen_descr   ? "descr"
                             : !seen_order ? "fortran_order"
                                           : "shape");
    npy_skip_space(&c);
    if (c.p != c.end)
        return tsr_error_set(err, TSR_CORRUPT, "npy header: text after the dictionary");
    return TSR_OK;
}

static size_t npy_type_size(tsr_npy_type type)
{
    switch (type) {
    case TSR_NPY_F16:
        return 2;
    case TSR_NPY_F64:
        return 8;
    case TSR_NPY_F32:
    default:
        return 4;
    }
}

/* The preamble and header of an .npy at bytes (len of them available, the data
 * need not be): the array's type and shape in *meta, where its data starts
 * (*data_off) and how many bytes it takes (*data_bytes). */
static tsr_status npy_meta(const uint8_t *bytes, size_t len, tsr_npy *meta, size_t *data_off,
                           size_t *data_bytes, tsr_error *err)
{
    memset(meta, 0, sizeof *meta);
    if (bytes == NULL || len < 10 || memcmp(bytes, npy_magic, sizeof npy_magic) != 0)
        return tsr_error_set(err, TSR_CORRUPT, "npy: bad magic (not a .npy file)");
    uint8_t major = bytes[6];
    size_t hlen, off;
    if (major == 1) {
        hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return tsr_error_set(err, TSR_CORRUPT, "npy: truncated header");
        hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 |
               (size_t)bytes[11] << 24;
        off = 12;
    } else {
        return tsr_error_set(err, TSR_BAD_ATTRIBUTE, "npy: format version %u.%u unsupported", major,
                             bytes[7]);
    }
    if (hlen > len - off)
        return tsr_error_set(err, TSR_CORRUPT, "npy: truncated header");
    for (size_t i = 0; i < hlen; i++) {
        uint8_t ch = bytes[off + i];
        if (ch == 0 || ch >= 0x80)
            return tsr_error_set(err, TSR_CORRUPT, "npy header: non-ASCII byte");
    }
    tsr_status st = npy_header((const char *)bytes + off, hlen, meta, err);
    if (st != TSR_OK)
        return st;
    size_t esize = npy_type_size(meta->type);
    size_t count = 1;
    for (int i = 0; i < meta->rank; i++) {
        uint64_t d = (uint64_t)meta->shape[i];
        if (d != 0 && count > (SIZE_MAX / esize) / d)
            return tsr_error_set(err, TSR_CORRUPT, "npy: shape overflows the address space");
        count *= (size_t)d;
    }
    meta->count = count;
    *data_off = off + hlen;
    *data_bytes = count * esize;
    return TSR_OK;
}

tsr_status tsr_npy_parse(const uint8_t *bytes, size_t len, tsr_npy *out, tsr_error *err)
{
    tsr_npy meta;
    size_t data_off, data_bytes;
    memset(out, 0, sizeof *out);
    tsr_status st = npy_meta(bytes, len, &meta, &data_off, &data_bytes, err);
    if (st != TSR_OK)
        return st;
    size_t body = len - data_off;
    if (body < data_bytes)
        return tsr_error_set(err, TSR_CORRUPT, "npy: truncated data (%zu of %zu bytes)", body,
                             data_bytes);
    if (body > data_bytes)
        return tsr_error_set(err, TSR_CORRUPT, "npy: %zu bytes past the data", body - data_bytes);
    meta.data = malloc(data_bytes > 0 ? data_bytes : 1);
    if (meta.data == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "npy: %zu bytes of data", data_bytes);
    memcpy(meta.data, bytes + data_off, data_bytes);
    *out = meta;
    return TSR_OK;
}

/* The largest header read from a file: numpy writes a few hundred bytes. */
#define NPY_HEADER_MAX (1u << 20)

/* Reads one .npy from f into *buf: the preamble and header first, then only the
 * data they announce and a little past it (to report bytes past the data), so a
 * source that never ends (a pipe, /dev/zero) costs no more than the array it
 * claims to hold. *len is what was read; tsr_npy_parse judges it. */
static tsr_status npy_read_bounded(FILE *f, uint8_t **buf, size_t *len, tsr_error *err)
{
    enum { PAST_PROBE = 4096 };
    uint8_t pre[12];
    *buf = NULL;
    *len = fread(pre, 1, 10, f);
    if (*len == 10 && (pre[6] == 2 || pre[6] == 3))
        *len += fread(pre + 10, 1, 2, f);
    size_t hlen =
        *len < 10 ? 0
        : *len == 12
            ? ((size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24)
            : ((size_t)pre[8] | (size_t)pre[9] << 8);
    if (hlen > NPY_HEADER_MAX)
        return tsr_error_set(err, TSR_CORRUPT, "npy: a header of %zu bytes (at most %u)", hlen,
                             NPY_HEADER_MAX);
    uint8_t *head = malloc(*len + hlen + 1);
    if (head == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "npy: header");
    memcpy(head, pre, *len);
    *len += fread(head + *len, 1, hlen, f);
    tsr_npy meta;
    size_t data_off, data_bytes;
    tsr_status st = npy_meta(head, *len, &meta, &data_off, &data_bytes, err);
    if (st != TSR_OK) {
        free(head);
        *len = 0;
        return st;
    }
    size_t cap = data_off + data_bytes + PAST_PROBE;
    uint8_t *all = cap > data_bytes ? realloc(head, cap) : NULL;
    if (all == NULL) {
        free(head);
        *len = 0;
        return tsr_error_set(err, TSR_NO_MEMORY, "npy: %zu bytes of data", data_bytes);
    }
    *len += fread(all + *len, 1, cap - *len, f);
    if (ferror(f)) {
        free(all);
        *len = 0;
        return tsr_error_set(err, TSR_IO_ERROR, "read error");
    }
    if (*len == cap) {
        /* More past the data than the probe read: a file's size says how much. */
        struct stat sb;
        free(all);
        *len = 0;
        if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size >= cap)
            return tsr_error_set(
                err, TSR_CORRUPT, "npy: %llu bytes past the data",
                (unsigned long long)((uint64_t)sb.st_size - data_off - data_bytes));
        return tsr_error_set(err, TSR_CORRUPT, "npy: more than %d bytes past the data",
                             PAST_PROBE - 1);
    }
    *buf = all;
    return TSR_OK;
}

tsr_status tsr_npy_read(const char *path, tsr_npy *out, tsr_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(errno));
    uint8_t *buf;
    size_t len;
    tsr_status st = npy_read_bounded(f, &buf, &len, err);
    fclose(f);
    if (st == TSR_OK)
        st = tsr_npy_parse(buf, len, out, err);
    free(buf);
    if (st != TSR_OK && err != NULL)
        tsr_error_prefix(err, "%s", path);
    return st;
}

static tsr_status npy_write_file(const char *path, const uint8_t *head, size_t head_len,
                                 const void *data, size_t bytes, tsr_error *err);

tsr_status tsr_npy_write(const char *path, tsr_npy_type type, int rank, const int64_t *shape,
                         const void *data, tsr_error *err)
{
    if (rank < 0 || rank > TSR_MAX_RANK || (unsigned)type > TSR_NPY_F64)
        return tsr_error_set(err, TSR_INVALID_ARGUMENT, "npy write: bad rank or type");
    static const char *const descrs[] = {"<f4", "<f2", "<f8"};
    char dict[400];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descrs[type]);
    size_t count = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return tsr_error_set(err, TSR_INVALID_ARGUMENT, "npy write: negative dimension");
        count *= (size_t)shape[i];
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i],
                      rank == 1 ? "," : (i + 1 < rank ? ", " : ""));
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* Pad with spaces so that the data starts on a 64-byte boundary. */
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    uint8_t head[512];
    memcpy(head, npy_magic, 6);
    head[6] = 1;
    head[7] = 0;
    size_t hlen = padded - 10;
    head[8] = (uint8_t)(hlen & 0xff);
    head[9] = (uint8_t)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', padded - total);
    head[padded - 1] = '\n';

    return npy_write_file(path, head, padded, data, count * npy_type_size(type), err);
}

/* Writes all of buf to fd; false with errno set on failure. */
static bool npy_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* The header and data into fd, synced; false with errno set on failure. */
static bool npy_write_fd(int fd, const uint8_t *head, size_t head_len, const void *data,
                         size_t bytes)
{
    return npy_write_all(fd, head, head_len) && (bytes == 0 || npy_write_all(fd, data, bytes)) &&
           (fsync(fd) == 0 || errno == EINVAL || errno == EROFS);
}

/*
 * Where the file goes. A regular file (new or existing, or the target of a
 * symbolic link) is replaced atomically: a temporary file beside the target,
 * then a rename, so a reader never sees half an array; the link stays a link,
 * and the file gets the mode the replaced one had, or 0666 less the umask for a
 * new one. Anything else (a device such as /dev/full or /dev/stdout, a FIFO) is
 * written in place, since renaming over it would replace the node itself.
 */
static tsr_status npy_write_file(const char *path, const uint8_t *head, size_t head_len,
                                 const void *data, size_t bytes, tsr_error *err)
{
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
            return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(errno));
        bool ok = npy_write_fd(fd, head, head_len, data, bytes);
        int saved = errno;
        ok = close(fd) == 0 && ok;
        return ok ? TSR_OK : tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(saved));
    }
    /* Replace what a symbolic link points to, not the link. */
    char *target = realpath(path, NULL);
    if (target == NULL && exists)
        return tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(errno));
    const char *dest = target != NULL ? target : path;
    size_t dlen = strlen(dest);
    char *tmp = malloc(dlen + 32);
    if (tmp == NULL) {
        free(target);
        return tsr_error_set(err, TSR_NO_MEMORY, "npy write: path");
    }
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 16; attempt++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint32_t)getpid() * 2654435761u + (uint32_t)attempt;
        snprintf(tmp, dlen + 32, "%s.tmp%08x", dest, r);
        /* 0666 less the umask, as any new file; an existing file's mode below. */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int saved = errno;
        char *slash = strrchr(tmp, '/');
        if (slash != NULL)
            *slash = '\0';
        tsr_status status =
            tsr_error_set(err, TSR_IO_ERROR, "%s: cannot create a file in %s to replace it: %s",
                          path, slash != NULL ? (slash == tmp ? "/" : tmp) : ".", strerror(saved));
        free(tmp);
        free(target);
        return status;
    }
    bool ok = (!exists || fchmod(fd, st.st_mode & 07777) == 0) &&
              npy_write_fd(fd, head, head_len, data, bytes);
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, dest) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok)
        unlink(tmp);
    free(tmp);
    free(target);
    return ok ? TSR_OK : tsr_error_set(err, TSR_IO_ERROR, "%s: %s", path, strerror(saved));
}

void tsr_npy_free(tsr_npy *npy)
{
    if (npy != NULL) {
        free(npy->data);
        memset(npy, 0, sizeof *npy);
    }
}

tsr_status tsr_npy_to_tensor(const tsr_npy *npy, const tsr_tensor_desc *want, void **out,
                             tsr_error *err)
{
    *out = NULL;
    bool same = npy->rank == want->rank;
    for (int i = 0; same && i < want->rank; i++)
        same = npy->shape[i] == want->shape[i];
    if (!same) {
        char got[160], exp[160];
        int g = snprintf(got, sizeof got, "(");
        for (int i = 0; i < npy->rank; i++)
            g += snprintf(got + g, sizeof got - (size_t)g, "%s%lld", i ? "," : "",
                          (long long)npy->shape[i]);
        snprintf(got + g, sizeof got - (size_t)g, ")");
        int e = snprintf(exp, sizeof exp, "(");
        for (int i = 0; i < want->rank; i++)
            e += snprintf(exp + e, sizeof exp - (size_t)e, "%s%lld", i ? "," : "",
                          (long long)want->shape[i]);
        snprintf(exp + e, sizeof exp - (size_t)e, ")");
        return tsr_error_set(err, TSR_BUFFER_MISMATCH, "%s: shape %s, expected %s", want->name, got,
                             exp);
    }
    size_t count = npy->count;
    size_t esize = tsr_dtype_size(want->dtype);
    if (esize == 0)
        return tsr_error_set(err, TSR_BAD_DTYPE, "%s: bad dtype", want->name);
    void *buf = malloc(count * esize > 0 ? count * esize : 1);
    if (buf == NULL)
        return tsr_error_set(err, TSR_NO_MEMORY, "%s: %zu bytes", want->name, count * esize);
    switch (npy->type) {
    case TSR_NPY_F32:
        tsr_dtype_convert(want->dtype, buf, TSR_F32, npy->data, count);
        break;
    case TSR_NPY_F16:
        tsr_dtype_convert(want->dtype, buf, TSR_F16, npy->data, count);
        break;
    case TSR_NPY_F64:
        /* One rounding straight from f64, never two through f32. */
        for (size_t i = 0; i < count; i++)
            tsr_dtype_store(want->dtype, buf, i, ((const double *)npy->data)[i]);
        break;
    }
    *out = buf;
    return TSR_OK;
}
