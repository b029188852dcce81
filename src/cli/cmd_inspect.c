/*
 * cmd_inspect.c - `moestream inspect M.gguf [--tensors] [--json]`: what is in
 * a GGUF. Metadata (arrays summarized), the tensor table (with --tensors),
 * byte totals (dense vs routed experts, per type, per class), bytes per
 * expert, which layout the file follows (llama.cpp deepseek4, ds4, or
 * unknown), and a check of every expected deepseek4 tensor and its shape
 * against src/model/layout.h.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "model/layout.h"
#include "moestream.h"
#include "server/server.h"
#include "text/utf8.h"
#include "util/parse.h"

#define N_ARRAY_HEAD 8    /* array elements shown */
#define STR_SHOWN 64      /* string bytes shown in text mode */
#define MAX_PROBLEMS 16

struct report {
    bool json;
    bool tensors;
    const struct gguf_file *f;
    bool is_dsv4;
    bool hp_ok;
    struct dsv4_hparams hp;
    struct dsv4_layout layout;
    int *cls;          /* per file tensor: enum dsv4_class, -1 MTP, -2 other */
    char layout_desc[256];
    char problems[MAX_PROBLEMS][256];
    int n_problems;
    int n_problems_total;
};

static void problem(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct report *r, const char *fmt, ...) {
    r->n_problems_total++;
    if (r->n_problems >= MAX_PROBLEMS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->problems[r->n_problems++], sizeof r->problems[0], fmt, ap);
    va_end(ap);
}

/* ---- printing helpers --------------------------------------------------- */

/* A float as JSON: a number when finite, else the string "NaN",
 * "Infinity" or "-Infinity" (JSON has no such numbers). */
static json_t *json_float(double v) {
    if (isfinite(v)) return json_real(v);
    return json_string(isnan(v) ? "NaN" : v > 0 ? "Infinity" : "-Infinity");
}

static void text_str(const char *s, uint64_t len) {
    putchar('"');
    uint64_t n = len < STR_SHOWN ? len : STR_SHOWN;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    printf(len > n ? "\"..." : "\"");
}

static void print_scalar(enum gguf_vtype t, const void *p, bool json) {
    switch (t) {
    case GGUF_TYPE_UINT8: printf("%u", *(const uint8_t *)p); break;
    case GGUF_TYPE_INT8: printf("%d", *(const int8_t *)p); break;
    case GGUF_TYPE_UINT16: printf("%u", *(const uint16_t *)p); break;
    case GGUF_TYPE_INT16: printf("%d", *(const int16_t *)p); break;
    case GGUF_TYPE_UINT32: printf("%" PRIu32, *(const uint32_t *)p); break;
    case GGUF_TYPE_INT32: printf("%" PRId32, *(const int32_t *)p); break;
    case GGUF_TYPE_UINT64: printf("%" PRIu64, *(const uint64_t *)p); break;
    case GGUF_TYPE_INT64: printf("%" PRId64, *(const int64_t *)p); break;
    case GGUF_TYPE_FLOAT32: printf("%.9g", (double)*(const float *)p); break;
    case GGUF_TYPE_FLOAT64: printf("%.17g", *(const double *)p); break;
    case GGUF_TYPE_BOOL: printf("%s", *(const uint8_t *)p ? "true" : "false"); break;
    case GGUF_TYPE_STRING: {
        const struct gguf_str *s = p;
        text_str(s->data, s->len);
        break;
    }
    default: printf("?"); break;
    }
}

static size_t vtype_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    case GGUF_TYPE_STRING: return sizeof(struct gguf_str);
    case GGUF_TYPE_ARRAY: return sizeof(struct gguf_array);
    default: return 0;
    }
}

/* A value: scalars in full; arrays as type, count and the first elements
 * (text: "[u32 x 4] 0, 4, 128, 4"; JSON: {"type":..,"n":..,"head":[..]}). */
static void print_value(const struct gguf_value *v, bool json) {
    if (v->type != GGUF_TYPE_ARRAY) {
        const void *p;
        uint8_t b;
        switch (v->type) {
        case GGUF_TYPE_STRING: p = &v->str; break;
        case GGUF_TYPE_BOOL: b = v->b; p = &b; break;
        default: {
            /* The reader widens scalars; print from the widened field. */
            if (v->type == GGUF_TYPE_FLOAT32 || v->type == GGUF_TYPE_FLOAT64)
                printf(v->type == GGUF_TYPE_FLOAT32 ? "%.9g" : "%.17g", v->f64);
            else if (v->type == GGUF_TYPE_INT8 || v->type == GGUF_TYPE_INT16 ||
                     v->type == GGUF_TYPE_INT32 || v->type == GGUF_TYPE_INT64)
                printf("%" PRId64, v->i64);
            else
                printf("%" PRIu64, v->u64);
            return;
        }
        }
        print_scalar(v->type, p, json);
        return;
    }
    const struct gguf_array *a = &v->arr;
    uint64_t n = a->n < N_ARRAY_HEAD ? a->n : N_ARRAY_HEAD;
    size_t es = vtype_size(a->type);
    printf("[%s x %" PRIu64 "]%s", gguf_vtype_name(a->type), a->n, n ? " " : "");
    for (uint64_t i = 0; i < n; i++) {
        if (i) printf(", ");
        if (a->type == GGUF_TYPE_ARRAY || !es) printf("[...]");
        else print_scalar(a->type, (const char *)a->data + i * es, json);
    }
    if (a->n > n) printf(", ...");
}

static void print_shape(const struct gguf_tensor *t, char *buf, size_t cap) {
    size_t len = 0;
    len += (size_t)snprintf(buf + len, cap - len, "{");
    for (uint32_t d = 0; d < t->n_dims && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    if (len < cap) snprintf(buf + len, cap - len, "}");
}

/* ---- analysis ----------------------------------------------------------- */

static const char *file_class_name(int c) {
    return c >= 0 ? dsv4_class_name((enum dsv4_class)c) : c == -1 ? "mtp" : "other";
}

static bool is_routed(const struct report *r, uint64_t i) {
    if (r->cls[i] >= 0) return dsv4_class_is_routed((enum dsv4_class)r->cls[i]);
    return strstr(r->f->tensors[i].name, "_exps.") != NULL;
}

static enum ms_type tensor_type_of(const struct gguf_file *f, const char *name, bool *found) {
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    *found = t != NULL;
    return t ? t->type : MS_TYPE_F32;
}

static void detect_layout(struct report *r) {
    const struct gguf_file *f = r->f;
    const char *arch = NULL;
    ms_err err;
    if (gguf_get_str(f, "general.architecture", &arch, &err)) {
        snprintf(r->layout_desc, sizeof r->layout_desc,
                 "unknown/not deepseek4 (no general.architecture)");
        return;
    }
    if (strcmp(arch, DSV4_ARCH)) {
        snprintf(r->layout_desc, sizeof r->layout_desc,
                 "unknown/not deepseek4 (general.architecture = %s)", arch);
        return;
    }
    r->is_dsv4 = true;
    uint64_t n_nextn = 0, n_mtp_file = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (!strncmp(f->tensors[i].name, "mtp.", 4)) n_mtp_file++;
        else if (dsv4_is_mtp_name(f->tensors[i].name)) n_nextn++;
    }
    if (dsv4_hparams_read(&r->hp, f, &err)) {
        problem(r, "deepseek4 metadata: %s", err.msg);
    } else {
        dsv4_hparams_probe_nextn(&r->hp, f);
        if (dsv4_layout_build(&r->hp, &r->layout, &err)) problem(r, "layout: %s", err.msg);
        else r->hp_ok = true;
    }
    if (n_mtp_file) {
        snprintf(r->layout_desc, sizeof r->layout_desc,
                 "ds4 MTP file (%" PRIu64 " mtp.* tensors)", n_mtp_file);
        return;
    }
    if (n_nextn) {
        snprintf(r->layout_desc, sizeof r->layout_desc,
                 "llama.cpp deepseek4, MTP as blk.%u.nextn.* (%" PRIu64 " tensors)",
                 r->hp_ok ? dsv4_n_layer(&r->hp) : 0, n_nextn);
        return;
    }
    /* ds4's published mix (docs/gguf.md, "Layouts we accept"): Q8_0 attention, F16 HC and router, and
     * IQ2_XXS / Q4_K / MXFP4 gate-up experts. Same names as llama.cpp. */
    bool f1, f2, f3, f4;
    enum ms_type q_a = tensor_type_of(f, "blk.0.attn_q_a.weight", &f1);
    enum ms_type hc = tensor_type_of(f, "blk.0.hc_attn_fn.weight", &f2);
    enum ms_type router = tensor_type_of(f, "blk.0.ffn_gate_inp.weight", &f3);
    enum ms_type gate = tensor_type_of(f, "blk.0.ffn_gate_exps.weight", &f4);
    bool ds4 = f1 && f2 && f3 && f4 && q_a == MS_TYPE_Q8_0 && hc == MS_TYPE_F16 &&
               router == MS_TYPE_F16 &&
               (gate == MS_TYPE_IQ2_XXS || gate == MS_TYPE_Q4_K || gate == MS_TYPE_MXFP4);
    if (ds4)
        snprintf(r->layout_desc, sizeof r->layout_desc,
                 "ds4 (quant mix matches ds4's: %s experts, q8_0 attention, f16 HC/router; "
                 "MTP in a separate file)", ms_type_name(gate));
    else
        snprintf(r->layout_desc, sizeof r->layout_desc, "llama.cpp deepseek4 (no MTP block)");
}

static void classify_and_check(struct report *r) {
    const struct gguf_file *f = r->f;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        r->cls[i] = dsv4_is_mtp_name(t->name) ? -1 : -2;
        if (!r->hp_ok) continue;
        long k = dsv4_layout_find(&r->layout, t->name);
        if (k < 0) {
            if (r->cls[i] == -2) problem(r, "unexpected tensor %s", t->name);
            continue;
        }
        const struct dsv4_tensor_info *e = &r->layout.t[k];
        r->cls[i] = e->cls;
        bool same = t->n_dims == e->n_dims;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS && same; d++) same = t->ne[d] == e->ne[d];
        if (!same) {
            char got[96];
            print_shape(t, got, sizeof got);
            problem(r, "%s has shape %s, expected {%" PRId64 ", %" PRId64 ", %" PRId64 "} "
                    "(first %u dims)", t->name, got, e->ne[0], e->ne[1], e->ne[2], e->n_dims);
        }
        if (e->cls == DSV4_C_TID2EID && t->type != MS_TYPE_I32)
            problem(r, "%s is %s, expected i32", t->name, ms_type_name(t->type));
    }
    if (!r->hp_ok) return;
    for (size_t k = 0; k < r->layout.n; k++)
        if (!gguf_find_tensor(f, r->layout.t[k].name))
            problem(r, "missing tensor %s", r->layout.t[k].name);
}

/* ---- output -------------------------------------------------------------- */

struct totals {
    uint64_t dense, routed, all;
    uint64_t by_type[MS_TYPE_COUNT];
    uint64_t by_class[DSV4_C_COUNT + 2]; /* + mtp, other */
};

static void compute_totals(const struct report *r, struct totals *s) {
    memset(s, 0, sizeof *s);
    for (uint64_t i = 0; i < r->f->n_tensors; i++) {
        const struct gguf_tensor *t = &r->f->tensors[i];
        s->all += t->size;
        if (is_routed(r, i)) s->routed += t->size;
        else s->dense += t->size;
        if ((unsigned)t->type < MS_TYPE_COUNT) s->by_type[t->type] += t->size;
        int c = r->cls[i];
        s->by_class[c >= 0 ? c : c == -1 ? DSV4_C_COUNT : DSV4_C_COUNT + 1] += t->size;
    }
}

/* Bytes of one routed expert (gate + up + down) in layer il, 0 if none. */
static uint64_t expert_bytes(const struct report *r, uint32_t il) {
    static const char *const kinds[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    uint64_t b = 0;
    for (int k = 0; k < 3; k++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%u.%s.weight", il, kinds[k]);
        const struct gguf_tensor *t = gguf_find_tensor(r->f, name);
        if (t && t->n_dims == 3 && t->ne[2] > 0) b += t->size / (uint64_t)t->ne[2];
    }
    return b;
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

static void print_text(const struct report *r, const struct totals *s) {
    const struct gguf_file *f = r->f;
    printf("file: %s (%" PRIu64 " bytes, GGUF v%u, alignment %" PRIu64 ", data at %" PRIu64 ")\n",
           f->path, f->file_size, f->version, f->alignment, f->data_offset);
    printf("metadata: %" PRIu64 " keys\n", f->n_kv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        printf("  %s = ", f->kv[i].key.data);
        print_value(&f->kv[i].val, false);
        putchar('\n');
    }
    printf("tensors: %" PRIu64 " (%.2f MiB)\n", f->n_tensors, mib(s->all));
    if (r->tensors) {
        printf("  %-44s %-8s %-26s %14s %14s  %s\n", "name", "type", "shape", "bytes", "offset",
               "class");
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            char shape[96];
            print_shape(t, shape, sizeof shape);
            printf("  %-44s %-8s %-26s %14" PRIu64 " %14" PRIu64 "  %s\n", t->name,
                   ms_type_name(t->type) ? ms_type_name(t->type) : "?", shape, t->size,
                   t->offset, file_class_name(r->cls[i]));
        }
    }
    printf("dense bytes: %" PRIu64 " (%.2f MiB)\n", s->dense, mib(s->dense));
    printf("routed expert bytes: %" PRIu64 " (%.2f MiB, %.1f%%)\n", s->routed, mib(s->routed),
           s->all ? 100.0 * (double)s->routed / (double)s->all : 0.0);
    printf("bytes by type:");
    for (int t = 0; t < MS_TYPE_COUNT; t++)
        if (s->by_type[t]) printf(" %s %" PRIu64, ms_type_name((enum ms_type)t), s->by_type[t]);
    printf("\nbytes by class:");
    for (int c = 0; c < DSV4_C_COUNT + 2; c++)
        if (s->by_class[c]) printf(" %s %" PRIu64, file_class_name(c < DSV4_C_COUNT ? c :
                                                   c == DSV4_C_COUNT ? -1 : -2), s->by_class[c]);
    putchar('\n');
    if (r->hp_ok) {
        uint32_t n_layer = dsv4_n_layer(&r->hp);
        uint64_t b0 = expert_bytes(r, 0);
        bool uniform = true;
        for (uint32_t il = 1; il < n_layer; il++) uniform &= expert_bytes(r, il) == b0;
        if (uniform) {
            printf("bytes per expert: %" PRIu64 " (%u layers x %u experts)\n", b0, n_layer,
                   r->hp.n_expert);
        } else {
            printf("bytes per expert by layer:");
            for (uint32_t il = 0; il < n_layer; il++)
                printf(" %u:%" PRIu64, il, expert_bytes(r, il));
            putchar('\n');
        }
        printf("model: %u layers (+%u MTP), n_embd %u, %u experts (%u used, %u shared), "
               "vocab %u, ratios", n_layer, r->hp.n_nextn, r->hp.n_embd, r->hp.n_expert,
               r->hp.n_expert_used, r->hp.n_expert_shared, r->hp.n_vocab);
        for (uint32_t il = 0; il < r->hp.n_block; il++)
            printf("%c%u", il ? ',' : ' ', r->hp.compress_ratio[il]);
        printf(", hash layers %u\n", r->hp.n_hash_layer);
    }
    printf("layout: %s\n", r->layout_desc);
    if (r->is_dsv4) {
        if (r->n_problems_total == 0)
            printf("check: all %zu expected deepseek4 tensors present with expected shapes\n",
                   r->layout.n);
        else
            printf("check: %d problem(s)\n", r->n_problems_total);
        for (int i = 0; i < r->n_problems; i++) printf("  %s\n", r->problems[i]);
        if (r->n_problems_total > r->n_problems)
            printf("  ... %d more\n", r->n_problems_total - r->n_problems);
    }
}

/* One array element / scalar as JSON (p points at its packed value). */
static json_t *json_scalar(enum gguf_vtype t, const void *p) {
    switch (t) {
    case GGUF_TYPE_UINT8: return json_integer(*(const uint8_t *)p);
    case GGUF_TYPE_INT8: return json_integer(*(const int8_t *)p);
    case GGUF_TYPE_UINT16: return json_integer(*(const uint16_t *)p);
    case GGUF_TYPE_INT16: return json_integer(*(const int16_t *)p);
    case GGUF_TYPE_UINT32: return json_integer(*(const uint32_t *)p);
    case GGUF_TYPE_INT32: return json_integer(*(const int32_t *)p);
    case GGUF_TYPE_UINT64: { /* past INT64_MAX: exact as a string */
        const uint64_t v = *(const uint64_t *)p;
        if (v <= INT64_MAX) return json_integer((json_int_t)v);
        char b[32];
        snprintf(b, sizeof b, "%" PRIu64, v);
        return json_string(b);
    }
    case GGUF_TYPE_INT64: return json_integer(*(const int64_t *)p);
    case GGUF_TYPE_FLOAT32: return json_float(*(const float *)p);
    case GGUF_TYPE_FLOAT64: return json_float(*(const double *)p);
    case GGUF_TYPE_BOOL: return json_boolean(*(const uint8_t *)p);
    case GGUF_TYPE_STRING: {
        const struct gguf_str *s = p;
        return ms_json_text(s->data, s->len);
    }
    default: return json_null();
    }
}

/* A metadata value: scalars in full, arrays as {"type","n","head"}. */
static json_t *json_value(const struct gguf_value *v) {
    if (v->type != GGUF_TYPE_ARRAY) {
        switch (v->type) {
        case GGUF_TYPE_STRING: return ms_json_text(v->str.data, v->str.len);
        case GGUF_TYPE_BOOL: return json_boolean(v->b);
        case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: return json_float(v->f64);
        case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
            return json_integer(v->i64);
        default: return json_scalar(GGUF_TYPE_UINT64, &v->u64);
        }
    }
    const struct gguf_array *a = &v->arr;
    const uint64_t n = a->n < N_ARRAY_HEAD ? a->n : N_ARRAY_HEAD;
    const size_t es = vtype_size(a->type);
    json_t *head = json_array();
    for (uint64_t i = 0; head && i < n; i++)
        json_array_append_new(head, a->type == GGUF_TYPE_ARRAY || !es
                                        ? json_null()
                                        : json_scalar(a->type, (const char *)a->data + i * es));
    return json_pack("{s:s, s:I, s:o*}", "type", gguf_vtype_name(a->type), "n", (json_int_t)a->n,
                     "head", head);
}

/* Prints the report as one JSON document (jansson: always valid JSON). -1
 * on OOM or a write error. */
static int print_json(const struct report *r, const struct totals *s) {
    const struct gguf_file *f = r->f;
    json_t *root = json_object(), *meta = json_object(), *tensors = json_array();
    json_t *by_type = json_object(), *ebl = json_array(), *probs = json_array();
    if (!root || !meta || !tensors || !by_type || !ebl || !probs) goto oom;
    json_object_set_new(root, "file", ms_json_text(f->path, strlen(f->path)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)f->file_size));
    json_object_set_new(root, "version", json_integer(f->version));
    json_object_set_new(root, "alignment", json_integer((json_int_t)f->alignment));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)f->data_offset));
    for (uint64_t i = 0; i < f->n_kv; i++) {
        json_t *k = ms_json_text(f->kv[i].key.data, f->kv[i].key.len);
        if (!k) goto oom;
        json_object_set_new(meta, json_string_value(k), json_value(&f->kv[i].val));
        json_decref(k);
    }
    json_object_set_new(root, "metadata", meta);
    meta = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        json_t *shape = json_array();
        for (uint32_t d = 0; shape && d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->ne[d]));
        json_array_append_new(
            tensors, json_pack("{s:o*, s:s, s:o*, s:I, s:I, s:s}", "name",
                               ms_json_text(t->name, strlen(t->name)), "type",
                               ms_type_name(t->type) ? ms_type_name(t->type) : "?", "shape",
                               shape, "bytes", (json_int_t)t->size, "offset",
                               (json_int_t)t->offset, "class", file_class_name(r->cls[i])));
    }
    json_object_set_new(root, "tensors", tensors);
    tensors = NULL;
    json_object_set_new(root, "dense_bytes", json_integer((json_int_t)s->dense));
    json_object_set_new(root, "routed_bytes", json_integer((json_int_t)s->routed));
    json_object_set_new(root, "total_bytes", json_integer((json_int_t)s->all));
    for (int t = 0; t < MS_TYPE_COUNT; t++)
        if (s->by_type[t])
            json_object_set_new(by_type, ms_type_name((enum ms_type)t),
                                json_integer((json_int_t)s->by_type[t]));
    json_object_set_new(root, "bytes_by_type", by_type);
    by_type = NULL;
    if (r->hp_ok)
        for (uint32_t il = 0; il < dsv4_n_layer(&r->hp); il++)
            json_array_append_new(ebl, json_integer((json_int_t)expert_bytes(r, il)));
    json_object_set_new(root, "expert_bytes_by_layer", ebl);
    ebl = NULL;
    json_object_set_new(root, "layout", ms_json_text(r->layout_desc, strlen(r->layout_desc)));
    json_object_set_new(root, "deepseek4", json_boolean(r->is_dsv4));
    json_object_set_new(root, "problem_count", json_integer(r->n_problems_total));
    for (int i = 0; i < r->n_problems; i++)
        json_array_append_new(probs, ms_json_text(r->problems[i], strlen(r->problems[i])));
    json_object_set_new(root, "problems", probs);
    probs = NULL;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!text) return -1;
    const int rc = puts(text) < 0 ? -1 : 0;
    free(text);
    return rc;
oom:
    json_decref(root), json_decref(meta), json_decref(tensors), json_decref(by_type);
    json_decref(ebl), json_decref(probs);
    return -1;
}

/* Everything `inspect` was asked for. */
struct inspect_opts {
    const char *path;
    bool json, tensors;
    bool plan;                 /* --plan: the memory plan instead of the file report */
    struct ms_engine_params ep; /* the plan's options (--ctx, --mem, ...) */
    bool conversation;          /* --for chat|serve: their context by default */
};

#define INSPECT_USAGE                                                                      \
    "usage: moestream inspect [-m] M.gguf [--tensors] [--json]\n"                           \
    "       moestream inspect [-m] M.gguf --plan [--ctx N] [--mem SIZE] [--stream|--no-stream]\n" \
    "                 [--prefill-chunk N] [--moe-span N] [--cache-pct P] [--for run|chat|serve|bench] [--kv]\n" \
    "                 [--json]\n"                                                              \
    "  --for CMD  plan as CMD does (chat, serve and bench keep a snapshot of the session;\n"  \
    "             chat and serve take the longest context memory allows, up to 131072;\n"   \
    "             serve keeps --kv-ram-mb 2048 of session states)\n"                       \
    "  --kv       with a disk KV cache (its prefill's checkpoint captures)\n"

/* Parses the value of a --plan option a at argv[*i + 1] into o->ep; 2 on a
 * bad or missing value (message printed). */
static int plan_opt(int argc, char **argv, int *i, struct inspect_opts *o) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v) {
        fprintf(stderr, "moestream inspect: %s needs a value\n", a);
        return 2;
    }
    (*i)++;
    long n;
    if (!strcmp(a, "--mem")) {
        if (ms_parse_size(v, &o->ep.mem_bytes) || !o->ep.mem_bytes) {
            fprintf(stderr, "moestream inspect: --mem takes a size such as 24GiB, got '%s'\n", v);
            return 2;
        }
    } else if (!strcmp(a, "--cache-pct")) {
        if (ms_parse_long(v, 1, 100, &n)) {
            fprintf(stderr, "moestream inspect: --cache-pct takes 1..100, got '%s'\n", v);
            return 2;
        }
        o->ep.cache_pct = (double)n;
    } else if (!strcmp(a, "--for")) {
        if (strcmp(v, "run") && strcmp(v, "chat") && strcmp(v, "serve") && strcmp(v, "bench")) {
            fprintf(stderr, "moestream inspect: --for takes run, chat, serve or bench, got '%s'\n", v);
            return 2;
        }
        o->ep.n_snapshots = strcmp(v, "run") ? 1 : 0; /* as those commands set it */
        o->conversation = !strcmp(v, "chat") || !strcmp(v, "serve");
        o->ep.kept_state_bytes = strcmp(v, "serve") ? 0 : (uint64_t)MS_SERVE_RAM_MB_DEFAULT << 20;
        o->ep.kept_state_fit = true;
    } else if (!strcmp(a, "--prefill-chunk")) {
        if (ms_parse_long(v, 0, 1L << 40, &n)) {
            fprintf(stderr, "moestream inspect: --prefill-chunk takes an integer >= 0, got "
                            "'%s'\n", v);
            return 2;
        }
        o->ep.prefill_chunk = n ? n : MS_PREFILL_WHOLE;
    } else if (!strcmp(a, "--moe-span")) {
        if (ms_parse_long(v, -1, INT32_MAX, &n)) {
            fprintf(stderr, "moestream inspect: --moe-span takes an integer >= -1, got '%s'\n", v);
            return 2;
        }
        o->ep.moe_span = n;
    } else { /* --ctx, -c */
        if (ms_parse_long(v, 1, 1L << 40, &n)) {
            fprintf(stderr, "moestream inspect: %s takes an integer >= 1, got '%s'\n", a, v);
            return 2;
        }
        o->ep.n_ctx = n;
    }
    return CLI_CONTINUE;
}

/* Parses and validates argv into *o (see cli.h). */
static int inspect_parse(int argc, char **argv, struct inspect_opts *o) {
    memset(o, 0, sizeof *o);
    o->ep = ms_engine_params_default(NULL);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *file = NULL;
        if (!strcmp(a, "--tensors")) o->tensors = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--plan")) o->plan = true;
        else if (!strcmp(a, "--stream")) o->ep.stream = MS_STREAM_ON;
        else if (!strcmp(a, "--no-stream")) o->ep.stream = MS_STREAM_OFF;
        else if (!strcmp(a, "--kv")) { /* the cache's default interval */
            o->ep.kv_captures = true;
            o->ep.kv_interval = ms_kv_params_default(NULL).interval_tokens;
        }
        else if (!strcmp(a, "--ctx") || !strcmp(a, "-c") || !strcmp(a, "--mem") ||
                 !strcmp(a, "--cache-pct") || !strcmp(a, "--prefill-chunk") || !strcmp(a, "--moe-span") ||
                 !strcmp(a, "--for")) {
            const int rc = plan_opt(argc, argv, &i, o);
            if (rc != CLI_CONTINUE) return rc;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(INSPECT_USAGE);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "moestream inspect: %s needs a file\n", a);
                return 2;
            }
            file = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            file = a + 8;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "moestream inspect: unknown option '%s'\n", a);
            return 2;
        } else {
            file = a;
        }
        if (!file) continue;
        if (o->path) {
            fprintf(stderr, "moestream inspect: more than one file given\n");
            return 2;
        }
        o->path = file;
    }
    if (!o->path) {
        fprintf(stderr, "moestream inspect: a model file is required\n" INSPECT_USAGE);
        return 2;
    }
    if (o->conversation && o->ep.n_ctx == 0) o->ep.n_ctx = MS_CTX_AUTO;
    return CLI_CONTINUE;
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

/* `inspect --plan`: the memory plan the engine would make (ms_engine_plan),
 * without loading the weights. */
static int print_plan(const struct inspect_opts *o) {
    struct ms_engine_params p = o->ep;
    p.model_path = o->path;
    struct ms_plan pl;
    char line[512];
    ms_err err;
    if (ms_engine_plan(&p, &pl, line, sizeof line, &err)) {
        fprintf(stderr, "moestream inspect: %s\n", err.msg);
        return 1;
    }
    if (o->json) {
        json_t *j = json_pack(
            "{s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "stream",
            pl.stream, "limit_source", pl.limit_source, "limit_bytes", (json_int_t)pl.limit_bytes,
            "usable_bytes", (json_int_t)pl.usable_bytes, "n_ctx", (json_int_t)pl.n_ctx,
            "dense_bytes", (json_int_t)pl.dense_bytes, "full_layer_bytes",
            (json_int_t)pl.full_layer_bytes, "kv_bytes", (json_int_t)pl.kv_bytes,
            "kept_state_bytes", (json_int_t)pl.kept_state_bytes, "resid_bytes",
            (json_int_t)pl.resid_bytes, "scratch_bytes", (json_int_t)pl.scratch_bytes,
            "moe_span", (json_int_t)pl.moe_span,
            "layer_buffer_bytes", (json_int_t)pl.layer_buffer_bytes, "cache_bytes",
            (json_int_t)pl.cache_bytes, "routed_bytes", (json_int_t)pl.routed_bytes);
        char *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
        json_decref(j);
        if (!text) {
            fprintf(stderr, "moestream inspect: out of memory\n");
            return 1;
        }
        puts(text);
        free(text);
        return 0;
    }
    printf("%s\n", line);
    printf("  context          %" PRId64 " positions\n", pl.n_ctx);
    printf("  memory limit     %.2f GiB (%s), usable %.2f GiB\n", gib(pl.limit_bytes),
           pl.limit_source, gib(pl.usable_bytes));
    printf("  dense weights    %.2f GiB%s\n", gib(pl.dense_bytes + pl.full_layer_bytes),
           pl.stream ? "" : " (+ routed experts: the whole file is resident)");
    printf("  KV state         %.2f GiB", gib(pl.kv_bytes));
    if (pl.kept_state_bytes) printf(" (%.2f GiB of it for kept session states)", gib(pl.kept_state_bytes));
    printf("\n");
    printf("  residual stream  %.2f GiB (longest prefill pass)\n", gib(pl.resid_bytes));
    if (pl.moe_span)
        printf("  scratch          %.2f GiB (per ubatch; MoE rows of %" PRId64
               "-token spans)\n", gib(pl.scratch_bytes), pl.moe_span);
    else
        printf("  scratch          %.2f GiB (per ubatch)\n", gib(pl.scratch_bytes));
    if (pl.stream) {
        printf("  layer buffers    %.2f GiB (two whole layers, prefill; decode: expert cache)\n",
               gib(pl.layer_buffer_bytes));
        printf("  expert cache     %.2f GiB (%.1f%% of %.2f GiB routed)\n", gib(pl.cache_bytes),
               100.0 * (double)pl.cache_bytes / (double)(pl.routed_bytes ? pl.routed_bytes : 1),
               gib(pl.routed_bytes));
    }
    return 0;
}

static int inspect_run(const struct inspect_opts *o) {
    if (o->plan) return print_plan(o);
    struct report r;
    memset(&r, 0, sizeof r);
    r.json = o->json;
    r.tensors = o->tensors;
    struct gguf_file *f;
    ms_err err;
    if (gguf_open(&f, o->path, &err)) {
        fprintf(stderr, "moestream inspect: %s\n", err.msg);
        return 1;
    }
    r.f = f;
    r.cls = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *r.cls);
    if (!r.cls) {
        fprintf(stderr, "moestream inspect: out of memory\n");
        gguf_close(f);
        return 1;
    }
    detect_layout(&r);
    classify_and_check(&r);
    struct totals s;
    compute_totals(&r, &s);
    int rc = 0;
    if (r.json) {
        if (print_json(&r, &s)) {
            fprintf(stderr, "moestream inspect: cannot write the JSON report\n");
            rc = 1;
        }
    } else {
        print_text(&r, &s);
    }
    if (fflush(stdout) || ferror(stdout)) {
        fprintf(stderr, "moestream inspect: cannot write the output\n");
        rc = 1;
    }
    free(r.cls);
    dsv4_layout_free(&r.layout);
    gguf_close(f);
    return rc;
}

int cmd_inspect(int argc, char **argv) {
    struct inspect_opts o;
    const int rc = inspect_parse(argc, argv, &o);
    return rc == CLI_CONTINUE ? inspect_run(&o) : rc;
}
