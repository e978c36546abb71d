/* Columnar scan of a Chrome-trace event array: one pass over the bytes, no Python object per
 * event. Complete ("X") events become rows of flat columns; repeated strings (categories,
 * names) become codes into tables of their distinct raw values; each row's args object is
 * kept as a byte span for the few rows whose args Python decodes (collective metadata, shapes).
 *
 * Anything outside the common shape (B/E phases, string pids, exponents, a syntax error)
 * makes scan() return None: the caller then decodes the chunk with msgspec as before, so this
 * file only ever speeds up, never changes, what is read. Every read is bounds-checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) && defined(__GNUC__)
#define SCAN_SSE2 1
#include <emmintrin.h> /* x86-64's baseline: 16 bytes per compare in the white space and
                          string loops; other machines take the byte loops below */
#endif
#if defined(__GNUC__)
#define HOT inline __attribute__((always_inline))
#else
#define HOT inline
#endif

#define MAX_WHOLE_US (INT64_MAX / 1000 - 1)
#define NO_CODE UINT32_MAX
#define FLAG_META 1u  /* args hold collective metadata */
#define FLAG_DIMS 2u  /* args hold "Input Dims" */
#define FLAG_ODD 4u   /* a link field (correlation, ids, device, stream) is not a plain int */
#define FLAG_BAD 8u   /* a pid, tid, ts, dur, cat or name of a shape left to the general reader */
#define FLAG_GRAPH 16u /* "graph id" / "graph node id" other than 0: a CUDA graph replay */

enum { UNSUPPORTED = 1, SYNTAX = 2, NOMEM = 3 };

typedef struct {
    const unsigned char *p, *end;
    int error;
    int64_t shift; /* added to args offsets: where this buffer starts in the caller's text */
} Cur;

/* ---- growable columns ---------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t size, cap, item;
} Col;

static int col_reserve(Col *c, size_t cap) {
    char *data = realloc(c->data, cap * c->item);
    if (!data) return -1;
    c->data = data;
    c->cap = cap;
    return 0;
}

static int col_grow(Col *c) {
    size_t cap = c->cap ? c->cap * 2 : 4096;
    char *data = realloc(c->data, cap * c->item);
    if (!data) return -1;
    c->data = data;
    c->cap = cap;
    return 0;
}

/* One value of the column's item size: a fixed-size store each (the size is known where the
 * call is made, so no branch on it per value). */
static inline int col_push8(Col *c, int64_t value) {
    if (c->size == c->cap && col_grow(c) < 0) return -1;
    memcpy(c->data + c->size * 8, &value, 8);
    c->size++;
    return 0;
}

static inline int col_push4(Col *c, uint32_t value) {
    if (c->size == c->cap && col_grow(c) < 0) return -1;
    memcpy(c->data + c->size * 4, &value, 4);
    c->size++;
    return 0;
}

static inline int col_push1(Col *c, uint8_t value) {
    if (c->size == c->cap && col_grow(c) < 0) return -1;
    c->data[c->size++] = (char)value;
    return 0;
}

/* ---- distinct raw strings -> codes ---------------------------------------------------- */

typedef struct {
    const unsigned char *s;
    size_t len;
    uint32_t code;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, used;
    Slot *order;      /* the distinct strings in code order (spans of the scanned buffer) */
    size_t order_cap;
} Dict;

/* Length and the first and last 16 bytes: kernel names differ at their ends as often as at
 * their starts; equal hashes are told apart by memcmp. Eight bytes per multiply where the
 * string has them (a name of 16 bytes or more: four loads), a byte at a time below. */
static inline uint64_t mix(uint64_t h, uint64_t word) {
    h ^= word;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    if (n >= 16) {
        uint64_t w[4];
        memcpy(&w[0], s, 8);
        memcpy(&w[1], s + 8, 8);
        memcpy(&w[2], s + n - 16, 8);
        memcpy(&w[3], s + n - 8, 8);
        for (int i = 0; i < 4; i++) h = mix(h, w[i]);
        return h;
    }
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h;
}

static int dict_grow(Dict *d) {
    size_t cap = d->cap ? d->cap * 2 : 256;
    Slot *slots = calloc(cap, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < d->cap; i++) {
        if (!d->slots[i].s) continue;
        size_t j = hash_bytes(d->slots[i].s, d->slots[i].len) & (cap - 1);
        while (slots[j].s) j = (j + 1) & (cap - 1);
        slots[j] = d->slots[i];
    }
    free(d->slots);
    d->slots = slots;
    d->cap = cap;
    return 0;
}

/* The code of a string, a new one for a string not seen before. No Python object is made
 * here (the scan runs without the GIL): the table of values is built after it. */
static int64_t dict_code(Dict *d, const unsigned char *s, size_t len) {
    if ((d->used + 1) * 2 > d->cap && dict_grow(d) < 0) return -1;
    if (d->used == d->order_cap) {
        size_t cap = d->order_cap ? d->order_cap * 2 : 256;
        Slot *order = realloc(d->order, cap * sizeof(Slot));
        if (!order) return -1;
        d->order = order;
        d->order_cap = cap;
    }
    size_t j = hash_bytes(s, len) & (d->cap - 1);
    while (d->slots[j].s) {
        if (d->slots[j].len == len && memcmp(d->slots[j].s, s, len) == 0) return d->slots[j].code;
        j = (j + 1) & (d->cap - 1);
    }
    d->slots[j].s = s ? s : (const unsigned char *)"";
    d->slots[j].len = len;
    d->slots[j].code = (uint32_t)d->used;
    d->order[d->used] = d->slots[j];
    return d->used++;
}

/* The distinct strings as a list of bytes, in code order (with the GIL). */
static PyObject *dict_values(Dict *d) {
    PyObject *list = PyList_New((Py_ssize_t)d->used);
    if (!list) return NULL;
    for (size_t i = 0; i < d->used; i++) {
        PyObject *v = PyBytes_FromStringAndSize((const char *)d->order[i].s,
                                                (Py_ssize_t)d->order[i].len);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

/* ---- JSON pieces ---------------------------------------------------------------------- */

/* The hottest loop of the scan (a pretty-printed trace is a third white space): the cursor
 * in a local (a byte load may alias the struct, which kept it in memory), and one compare
 * for the common byte that is not white space. */
/* Byte classes by table: one load where four compares were. */
#define WS_BYTE 1
#define NUM_BYTE 2 /* what a JSON number's text is made of */
static const unsigned char BYTE_CLASS[256] = {
    ['\t'] = WS_BYTE, ['\n'] = WS_BYTE, ['\r'] = WS_BYTE, [' '] = WS_BYTE,
    ['0'] = NUM_BYTE, ['1'] = NUM_BYTE, ['2'] = NUM_BYTE, ['3'] = NUM_BYTE, ['4'] = NUM_BYTE,
    ['5'] = NUM_BYTE, ['6'] = NUM_BYTE, ['7'] = NUM_BYTE, ['8'] = NUM_BYTE, ['9'] = NUM_BYTE,
    ['.'] = NUM_BYTE, ['e'] = NUM_BYTE, ['E'] = NUM_BYTE, ['+'] = NUM_BYTE, ['-'] = NUM_BYTE,
};

static inline int is_ws(unsigned char ch) { return BYTE_CLASS[ch] & WS_BYTE; }

/* A run of white space past its first byte (a line break and its indentation), 16 bytes a
 * compare where SSE2 is. */
static const unsigned char *ws_run(const unsigned char *p, const unsigned char *end) {
#if SCAN_SSE2
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n');
    const __m128i cr = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                                 _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFFu;
        if (other) return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && is_ws(*p)) p++;
    return p;
}

static inline void ws(Cur *c) {
    const unsigned char *p = c->p, *end = c->end;
    if (p >= end || !is_ws(*p)) return; /* most tokens follow no white space */
    if (p + 1 < end && !is_ws(p[1])) {   /* ", " and ": ": one byte */
        c->p = p + 1;
        return;
    }
    c->p = ws_run(p + 1, end);
}

static int expect(Cur *c, unsigned char ch) {
    ws(c);
    if (c->p >= c->end || *c->p != ch) {
        c->error = SYNTAX;
        return -1;
    }
    c->p++;
    return 0;
}

/* A string's raw contents (between the quotes, escapes kept). The closing quote is found with
 * memchr; a quote preceded by an odd run of backslashes is escaped and the search goes on. */
static HOT int string_span(Cur *c, const unsigned char **s, size_t *len) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') {
        c->error = SYNTAX;
        return -1;
    }
    const unsigned char *start = ++c->p;
    const unsigned char *q = start;
#if SCAN_SSE2
    /* most strings (keys, categories, numbers' names) end within 16 bytes: one compare */
    if (c->end - start >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)start);
        unsigned hit = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')));
        unsigned esc = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
        if (hit && !(esc & ((hit & -hit) - 1))) { /* a quote with no backslash before it */
            q = start + __builtin_ctz(hit);
            *s = start;
            *len = (size_t)(q - start);
            c->p = q + 1;
            return 0;
        }
    }
#endif
    for (;;) {
        q = memchr(q, '"', (size_t)(c->end - q));
        if (!q) {
            c->error = SYNTAX;
            return -1;
        }
        const unsigned char *b = q;
        while (b > start && b[-1] == '\\') b--;
        if (((q - b) & 1) == 0) break;
        q++;
    }
    *s = start;
    *len = (size_t)(q - start);
    c->p = q + 1;
    return 0;
}

static int skip_value(Cur *c);

static int skip_literal(Cur *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0) {
        c->error = SYNTAX;
        return -1;
    }
    c->p += n;
    return 0;
}

static int skip_number(Cur *c) {
    const unsigned char *start = c->p;
    if (c->p < c->end && *c->p == '-') c->p++;
    while (c->p < c->end && (BYTE_CLASS[*c->p] & NUM_BYTE)) c->p++;
    if (c->p == start) {
        c->error = SYNTAX;
        return -1;
    }
    return 0;
}

static int skip_container(Cur *c, unsigned char open, unsigned char close) {
    c->p++; /* the opening bracket */
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        if (open == '{') {
            const unsigned char *s;
            size_t n;
            if (string_span(c, &s, &n) < 0 || expect(c, ':') < 0) return -1;
        }
        if (skip_value(c) < 0) return -1;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, close);
    }
}

static int skip_value(Cur *c) {
    ws(c);
    if (c->p >= c->end) {
        c->error = SYNTAX;
        return -1;
    }
    const unsigned char *s;
    size_t n;
    switch (*c->p) {
    case '"': return string_span(c, &s, &n);
    case '{': return skip_container(c, '{', '}');
    case '[': return skip_container(c, '[', ']');
    case 't': return skip_literal(c, "true");
    case 'f': return skip_literal(c, "false");
    case 'n': return skip_literal(c, "null");
    default: return skip_number(c);
    }
}

static int is_null(Cur *c) {
    ws(c);
    if ((size_t)(c->end - c->p) >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* A plain JSON integer (no fraction, no exponent) that fits in int64: 1; null: 0;
 * anything else: -1 with *consumed set when the value was skipped. */
static int plain_int(Cur *c, int64_t *out) {
    ws(c);
    if (is_null(c)) return 0;
    const unsigned char *p = c->p;
    int negative = 0;
    if (p < c->end && *p == '-') negative = 1, p++;
    if (p >= c->end || *p < '0' || *p > '9') return -1;
    uint64_t v = 0;
    /* 19 digits always fit in 64 bits: the overflow test only past them */
    const unsigned char *safe = c->end - p > 19 ? p + 19 : c->end;
    while (p < safe && *p >= '0' && *p <= '9') v = v * 10 + (unsigned)(*p++ - '0');
    while (p < c->end && *p >= '0' && *p <= '9') {
        unsigned d = *p - '0';
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
        p++;
    }
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E')) return -1;
    if (!negative && v > (uint64_t)INT64_MAX) return -1;
    if (negative && v > (uint64_t)INT64_MAX + 1) return -1;
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    c->p = p;
    return 1;
}

/* µs as a JSON number to exact ns (metrics: fractions past the ns digit round half away from
 * zero). 1: value; 0: null or out of int64 range; -1: not a plain decimal (unsupported). */
static int micros_to_ns(Cur *c, int64_t *out) {
    ws(c);
    if (is_null(c)) return 0;
    const unsigned char *p = c->p;
    int negative = 0;
    if (p < c->end && *p == '-') negative = 1, p++;
    if (p >= c->end || *p < '0' || *p > '9') return -1;
    uint64_t whole = 0;
    int overflow = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        if (whole > (uint64_t)MAX_WHOLE_US) overflow = 1;
        else whole = whole * 10 + (uint64_t)(*p - '0');
        p++;
    }
    int64_t frac = 0, digits = 0, round_up = 0;
    if (p < c->end && *p == '.') {
        p++;
        if (p >= c->end || *p < '0' || *p > '9') return -1;
        while (p < c->end && *p >= '0' && *p <= '9') {
            if (digits < 3) frac = frac * 10 + (*p - '0');
            else if (digits == 3) round_up = (*p - '0') >= 5;
            digits++;
            p++;
        }
        for (int64_t i = digits; i < 3; i++) frac *= 10;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) return -1;
    c->p = p;
    if (overflow || whole >= (uint64_t)MAX_WHOLE_US) return 0;
    int64_t magnitude = (int64_t)whole * 1000 + frac + round_up;
    *out = negative ? -magnitude : magnitude;
    return 1;
}

/* ---- the scan ------------------------------------------------------------------------- */

enum {
    C_TS, C_DUR, C_PID, C_TID, C_CORR, C_EXT, C_EXT_LC, C_DEVICE, C_STREAM, C_ARGS_AT, C_ARGS_LEN,
    N_INT
};
static const char *INT_NAMES[N_INT] = {"ts_ns", "dur_ns", "pid", "tid", "correlation",
                                       "external_id", "external_id_lc", "arg_device",
                                       "arg_stream", "args_at", "args_len"};

typedef struct {
    Col ints[N_INT];
    Col valid[N_INT]; /* uint8 per int column */
    Col cat, name;    /* uint32 codes */
    Col flags;        /* uint8 */
    Dict cats, names;
} Out;

#define KEY_IS(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), sizeof(lit) - 1) == 0)

static int is_meta_key(const unsigned char *k, size_t n) {
    switch (n) {
    case 3: return KEY_IS(k, n, "Seq");
    case 5: return KEY_IS(k, n, "dtype");
    case 8: return KEY_IS(k, n, "Src Rank") || KEY_IS(k, n, "Dst Rank");
    case 10: return KEY_IS(k, n, "Group size");
    case 11: return KEY_IS(k, n, "In msg size");
    case 12: return KEY_IS(k, n, "Out msg size");
    case 13: return KEY_IS(k, n, "In msg nelems");
    case 14: return KEY_IS(k, n, "Out msg nelems");
    case 15: return KEY_IS(k, n, "Collective name");
    case 16: return KEY_IS(k, n, "Process Group ID");
    case 18: return KEY_IS(k, n, "Process Group Name");
    case 19: return KEY_IS(k, n, "Process Group Ranks");
    case 25: return KEY_IS(k, n, "Process Group Description");
    default: return 0;
    }
}

static int link_field(const unsigned char *k, size_t n) {
    switch (n) {
    case 6: return KEY_IS(k, n, "device") ? C_DEVICE : (KEY_IS(k, n, "stream") ? C_STREAM : -1);
    case 11:
        if (KEY_IS(k, n, "correlation")) return C_CORR;
        if (KEY_IS(k, n, "External id")) return C_EXT;
        if (KEY_IS(k, n, "external id")) return C_EXT_LC;
        return -1;
    default: return -1;
    }
}

typedef struct {
    int64_t v[N_INT];
    uint8_t ok[N_INT];
    uint32_t cat, name;
    uint8_t flags;
    char ph;
    int has_ph;
    int odd; /* a field of a shape only the general reader handles: fatal for an X event */
} Row;

static int scan_args(Cur *c, const unsigned char *base, Row *row) {
    ws(c);
    if (is_null(c)) return 0;
    if (c->p >= c->end || *c->p != '{') return skip_value(c);
    row->v[C_ARGS_AT] = (c->p - base) + c->shift;
    row->ok[C_ARGS_AT] = 1;
    const unsigned char *start = c->p;
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            const unsigned char *k;
            size_t n;
            if (string_span(c, &k, &n) < 0 || expect(c, ':') < 0) return -1;
            int field = link_field(k, n);
            if (field >= 0) {
                int got = plain_int(c, &row->v[field]);
                if (got == 1) row->ok[field] = 1;
                else if (got < 0) {
                    row->flags |= FLAG_ODD;
                    if (skip_value(c) < 0) return -1;
                }
            } else if (KEY_IS(k, n, "graph id") || KEY_IS(k, n, "graph node id")) {
                int64_t id = 0;
                int got = plain_int(c, &id);
                if (got < 0) {
                    row->flags |= FLAG_GRAPH; /* the general decoder says what it is */
                    if (skip_value(c) < 0) return -1;
                } else if (got == 1 && id != 0) {
                    row->flags |= FLAG_GRAPH;
                }
            } else {
                if (KEY_IS(k, n, "Input Dims")) row->flags |= FLAG_DIMS;
                else if (is_meta_key(k, n)) row->flags |= FLAG_META;
                if (skip_value(c) < 0) return -1;
            }
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (expect(c, '}') < 0) return -1;
            break;
        }
    }
    row->v[C_ARGS_LEN] = c->p - start;
    row->ok[C_ARGS_LEN] = 1;
    return 0;
}

static int coded_string(Cur *c, Dict *d, uint32_t *code, Row *row) {
    ws(c);
    if (is_null(c)) return 0;
    if (c->p >= c->end || *c->p != '"') {
        row->odd = 1; /* a number as a name or category */
        return skip_value(c);
    }
    const unsigned char *s;
    size_t n;
    if (string_span(c, &s, &n) < 0) return -1;
    int64_t got = dict_code(d, s, n);
    if (got < 0) {
        c->error = NOMEM;
        return -1;
    }
    *code = (uint32_t)got;
    return 0;
}

static int scan_event(Cur *c, const unsigned char *base, Out *out, Row *row) {
    memset(row, 0, sizeof(*row));
    row->cat = row->name = NO_CODE;
    if (expect(c, '{') < 0) return -1;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        c->error = UNSUPPORTED; /* no phase */
        return -1;
    }
    for (;;) {
        const unsigned char *k;
        size_t n;
        if (string_span(c, &k, &n) < 0 || expect(c, ':') < 0) return -1;
        int r = 0;
        if (KEY_IS(k, n, "ph")) {
            const unsigned char *s;
            size_t len;
            if (string_span(c, &s, &len) < 0) {
                c->error = UNSUPPORTED;
                return -1;
            }
            if (len != 1) {
                c->error = UNSUPPORTED;
                return -1;
            }
            row->ph = (char)s[0];
            row->has_ph = 1;
        } else if (KEY_IS(k, n, "cat")) {
            r = coded_string(c, &out->cats, &row->cat, row);
        } else if (KEY_IS(k, n, "name")) {
            r = coded_string(c, &out->names, &row->name, row);
        } else if (KEY_IS(k, n, "pid") || KEY_IS(k, n, "tid")) {
            int field = k[0] == 'p' ? C_PID : C_TID;
            int got = plain_int(c, &row->v[field]);
            if (got < 0) {
                row->odd = 1; /* "stream 7", a float: the general reader's job */
                r = skip_value(c);
            } else {
                row->ok[field] = (uint8_t)got;
            }
        } else if (KEY_IS(k, n, "ts") || KEY_IS(k, n, "dur")) {
            int field = k[0] == 't' ? C_TS : C_DUR;
            int got = micros_to_ns(c, &row->v[field]);
            if (got < 0) {
                row->odd = 1; /* an exponent, a string */
                r = skip_value(c);
            } else {
                row->ok[field] = (uint8_t)got;
            }
        } else if (KEY_IS(k, n, "args")) {
            r = scan_args(c, base, row);
        } else {
            r = skip_value(c);
        }
        if (r < 0) return -1;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        return expect(c, '}');
    }
}

static int emit(Out *out, Row *row) {
    for (int i = 0; i < N_INT; i++) {
        int64_t v = row->ok[i] ? row->v[i] : 0;
        if (col_push8(&out->ints[i], v) < 0 || col_push1(&out->valid[i], row->ok[i]) < 0)
            return -1;
    }
    if (col_push4(&out->cat, row->cat) < 0 || col_push4(&out->name, row->name) < 0 ||
        col_push1(&out->flags, row->flags) < 0)
        return -1;
    return 0;
}

static void out_free(Out *out) {
    for (int i = 0; i < N_INT; i++) {
        free(out->ints[i].data);
        free(out->valid[i].data);
    }
    free(out->cat.data);
    free(out->name.data);
    free(out->flags.data);
    free(out->cats.slots);
    free(out->names.slots);
    free(out->cats.order);
    free(out->names.order);
}

/* A column handed to Python without a copy: it owns the scan's buffer (read-only, through
 * the buffer protocol; numpy's views of it keep it alive). A copy into bytes was 8 MB of
 * memcpy and fresh pages for a 35 MB rank. */
typedef struct {
    PyObject_HEAD char *data;
    Py_ssize_t size;
} Column;

static void column_dealloc(Column *col) {
    free(col->data);
    Py_TYPE(col)->tp_free((PyObject *)col);
}

static int column_getbuffer(Column *col, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)col, col->data ? col->data : (char *)"", col->size,
                             1, flags);
}

static Py_ssize_t column_len(Column *col) { return col->size; }

static PyBufferProcs COLUMN_BUFFER = {(getbufferproc)column_getbuffer, NULL};
static PySequenceMethods COLUMN_SEQUENCE = {.sq_length = (lenfunc)column_len};

static PyTypeObject COLUMN_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracecomm.ingest._scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_sequence = &COLUMN_SEQUENCE,
    .tp_as_buffer = &COLUMN_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scanned column's bytes (read-only buffer).",
};

/* The column's bytes, moved out of ``c`` (which is left empty, for ``out_free``). */
static PyObject *col_bytes(Col *c) {
    Column *col = PyObject_New(Column, &COLUMN_TYPE);
    if (!col) return NULL;
    col->data = c->data;
    col->size = (Py_ssize_t)(c->size * c->item);
    c->data = NULL;
    c->size = c->cap = 0;
    return (PyObject *)col;
}

static PyObject *result(Out *out) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int bad = 0;
    for (int i = 0; i < N_INT && !bad; i++) {
        PyObject *v = col_bytes(&out->ints[i]);
        char key[64];
        snprintf(key, sizeof key, "%s_valid", INT_NAMES[i]);
        PyObject *m = col_bytes(&out->valid[i]);
        bad = !v || !m || PyDict_SetItemString(d, INT_NAMES[i], v) < 0 ||
              PyDict_SetItemString(d, key, m) < 0;
        Py_XDECREF(v);
        Py_XDECREF(m);
    }
    const char *names[3] = {"cat_code", "name_code", "flags"};
    Col *cols[3] = {&out->cat, &out->name, &out->flags};
    for (int i = 0; i < 3 && !bad; i++) {
        PyObject *v = col_bytes(cols[i]);
        bad = !v || PyDict_SetItemString(d, names[i], v) < 0;
        Py_XDECREF(v);
    }
    Dict *tables[2] = {&out->cats, &out->names};
    const char *table_names[2] = {"cat_values", "name_values"};
    for (int i = 0; i < 2 && !bad; i++) {
        PyObject *v = dict_values(tables[i]);
        bad = !v || PyDict_SetItemString(d, table_names[i], v) < 0;
        Py_XDECREF(v);
    }
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* The events of the buffer into ``out``: 0, or UNSUPPORTED / SYNTAX (the general reader's
 * job) or NOMEM. Touches no Python object: it runs without the GIL. ``shift``: the offset of
 * the buffer in the caller's text (args offsets count from there). */
static int scan_events(const unsigned char *base, size_t len, int bare, int64_t shift,
                       Out *out) {
    Cur c = {base, base + len, 0, shift};
    Row row;
    if (!bare && expect(&c, '[') < 0) return UNSUPPORTED;
    ws(&c);
    if (bare && c.p == c.end) {
        /* no events */
    } else if (!bare && c.p < c.end && *c.p == ']') {
        c.p++;
    } else {
        for (;;) {
            if (scan_event(&c, base, out, &row) < 0) return c.error == NOMEM ? NOMEM : UNSUPPORTED;
            if (!row.has_ph || row.ph == 'B' || row.ph == 'E') return UNSUPPORTED;
            if (row.odd) row.flags |= FLAG_BAD; /* fatal only if the caller keeps the row */
            if (row.ph == 'X' && emit(out, &row) < 0) return NOMEM;
            ws(&c);
            if (c.p < c.end && *c.p == ',') {
                c.p++;
                continue;
            }
            if (!bare && expect(&c, ']') < 0) return UNSUPPORTED;
            break;
        }
    }
    ws(&c);
    return c.p == c.end ? 0 : UNSUPPORTED;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view, head = {0};
    int bare = 0; /* events separated by commas, without the array's brackets */
    if (!PyArg_ParseTuple(args, "y*|py*", &view, &bare, &head)) return NULL;
    Out out;
    memset(&out, 0, sizeof out);
    for (int i = 0; i < N_INT; i++) {
        out.ints[i].item = sizeof(int64_t);
        out.valid[i].item = 1;
    }
    out.cat.item = out.name.item = sizeof(uint32_t);
    out.flags.item = 1;
    /* about one complete event per 400 bytes of Kineto JSON: most columns never grow */
    size_t guess = (size_t)(view.len + head.len) / 400 + 1024;
    Col *all[2 * N_INT + 3];
    for (int i = 0; i < N_INT; i++) all[2 * i] = &out.ints[i], all[2 * i + 1] = &out.valid[i];
    all[2 * N_INT] = &out.cat, all[2 * N_INT + 1] = &out.name, all[2 * N_INT + 2] = &out.flags;
    int status = 0;
    for (int i = 0; i < 2 * N_INT + 3 && !status; i++)
        if (col_reserve(all[i], guess) < 0) status = NOMEM;
    /* the buffers are read-only and held by the views: other threads (other ranks' parses)
     * run while this one scans. ``head`` (bare): events before the text's, at offset 0 */
    Py_BEGIN_ALLOW_THREADS
    if (!status && head.buf && head.len)
        status = scan_events(head.buf, (size_t)head.len, 1, 0, &out);
    if (!status) status = scan_events(view.buf, (size_t)view.len, bare, head.len, &out);
    Py_END_ALLOW_THREADS
    PyObject *ret = NULL;
    if (status == 0) {
        ret = result(&out);
    } else if (status == NOMEM) {
        PyErr_NoMemory();
    } else {
        ret = Py_None;
        Py_INCREF(ret);
    }
    out_free(&out);
    if (head.buf) PyBuffer_Release(&head);
    PyBuffer_Release(&view);
    return ret;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(json_array, bare=False, head=b'') -> dict of columns (buffers) and string tables, or "
     "None when the array holds something only the general reader handles. bare: the events "
     "without the array's brackets. head: events (bare) that come before the array's, "
     "scanned first; args offsets count from head's start, the array's after head's end."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&COLUMN_TYPE) < 0) return NULL;
    return PyModule_Create(&MODULE);
}
