// meta: a GGUF file's header as libggml-base's gguf_* reader sees it.
#include "k3ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"

static void json_f64(double v, int digits) {
    if (isnan(v)) {
        fputs("\"nan\"", stdout);
    } else if (isinf(v)) {
        fputs(v > 0 ? "\"inf\"" : "\"-inf\"", stdout);
    } else {
        printf("%.*g", digits, v);
    }
}

// json_scalar writes element i of data, an array of scalars of type t.
static void json_scalar(enum gguf_type t, const void * data, size_t i) {
    switch (t) {
        case GGUF_TYPE_UINT8:   printf("%u", ((const uint8_t *) data)[i]); break;
        case GGUF_TYPE_INT8:    printf("%d", ((const int8_t *) data)[i]); break;
        case GGUF_TYPE_UINT16:  printf("%u", ((const uint16_t *) data)[i]); break;
        case GGUF_TYPE_INT16:   printf("%d", ((const int16_t *) data)[i]); break;
        case GGUF_TYPE_UINT32:  printf("%u", ((const uint32_t *) data)[i]); break;
        case GGUF_TYPE_INT32:   printf("%d", ((const int32_t *) data)[i]); break;
        case GGUF_TYPE_UINT64:  printf("%llu", (unsigned long long) ((const uint64_t *) data)[i]); break;
        case GGUF_TYPE_INT64:   printf("%lld", (long long) ((const int64_t *) data)[i]); break;
        case GGUF_TYPE_FLOAT32: json_f64(((const float *) data)[i], 9); break;
        case GGUF_TYPE_FLOAT64: json_f64(((const double *) data)[i], 17); break;
        case GGUF_TYPE_BOOL:    fputs(((const int8_t *) data)[i] ? "true" : "false", stdout); break;
        default:                die(EXIT_FAIL, "unexpected GGUF scalar type %d", (int) t);
    }
}

static void json_kv_value(const struct gguf_context * g, int64_t k) {
    enum gguf_type t = gguf_get_kv_type(g, k);
    if (t == GGUF_TYPE_STRING) {
        const char * s = gguf_get_val_str(g, k);
        json_str(s, strlen(s));
        return;
    }
    if (t != GGUF_TYPE_ARRAY) {
        json_scalar(t, gguf_get_val_data(g, k), 0);
        return;
    }
    enum gguf_type et = gguf_get_arr_type(g, k);
    size_t n = gguf_get_arr_n(g, k);
    putchar('[');
    const void * data = et == GGUF_TYPE_STRING ? NULL : gguf_get_arr_data(g, k);
    for (size_t i = 0; i < n; i++) {
        if (i) {
            putchar(',');
        }
        if (et == GGUF_TYPE_STRING) {
            const char * s = gguf_get_arr_str(g, k, i);
            json_str(s, strlen(s));
        } else {
            json_scalar(et, data, i);
        }
    }
    putchar(']');
}

int cmd_meta(int argc, char ** argv) {
    if (argc != 1) {
        die(EXIT_USAGE, "usage: meta MODEL");
    }
    struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
    struct gguf_context * g = gguf_init_from_file(argv[0], p);
    if (!g) {
        die(EXIT_REJECTED, "gguf_init_from_file failed for %s", argv[0]);
    }
    size_t data_off = gguf_get_data_offset(g);
    printf("{\"version\":%u,\"alignment\":%zu,\"data_offset\":%zu,\"kvs\":[", gguf_get_version(g),
           gguf_get_alignment(g), data_off);
    for (int64_t k = 0; k < gguf_get_n_kv(g); k++) {
        enum gguf_type t = gguf_get_kv_type(g, k);
        printf("%s{\"key\":", k ? ",\n" : "\n");
        const char * key = gguf_get_key(g, k);
        json_str(key, strlen(key));
        printf(",\"type\":%d,\"elem\":%d,\"value\":", (int) t, t == GGUF_TYPE_ARRAY ? (int) gguf_get_arr_type(g, k) : 0);
        json_kv_value(g, k);
        putchar('}');
    }
    printf("],\"tensors\":[");
    for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
        const char * name = gguf_get_tensor_name(g, i);
        const int64_t * ne = gguf_get_tensor_ne(g, i);
        printf("%s{\"name\":", i ? ",\n" : "\n");
        json_str(name, strlen(name));
        printf(",\"type\":%d,\"ne\":[%lld,%lld,%lld,%lld],\"offset\":%zu,\"size\":%zu}", (int) gguf_get_tensor_type(g, i),
               (long long) ne[0], (long long) ne[1], (long long) ne[2], (long long) ne[3],
               data_off + gguf_get_tensor_offset(g, i), gguf_get_tensor_size(g, i));
    }
    printf("]}\n");
    gguf_free(g);
    return 0;
}
