// Quant-format subcommands: dequant, quantize, from_float, vecdot, variants, types.
#define _GNU_SOURCE
#include "k3ref.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"

typedef const struct ggml_type_traits_cpu * (*traits_cpu_fn)(enum ggml_type);

// A CPU backend variant (libggml-cpu-*.so) opened for its type traits.
struct variant {
    char          name[256];
    char          path[4096];
    traits_cpu_fn traits;
};

static const char * const prefix = "libggml-cpu-";

static void variant_name(const char * file, char * name, size_t n) {
    snprintf(name, n, "%s", file + strlen(prefix));
    char * dot = strstr(name, ".so");
    if (dot) {
        *dot = 0;
    }
}

static bool is_variant_file(const char * f) {
    size_t n = strlen(f);
    return strncmp(f, prefix, strlen(prefix)) == 0 && n > 3 && strcmp(f + n - 3, ".so") == 0;
}

// score_variant returns ggml_backend_score of a variant library: 0 when this CPU
// cannot run it, -1 when it cannot be loaded.
static int score_variant(const char * path) {
    void * h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        return -1;
    }
    int (*score)(void) = (int (*)(void)) dlsym(h, "ggml_backend_score");
    int s = score ? score() : 0;
    dlclose(h);
    return s;
}

// best_variant picks what ggml_backend_load_best would: the highest-scoring variant.
static bool best_variant(char * path, size_t n, int * best_score) {
    DIR * d = opendir(libdir());
    if (!d) {
        die(EXIT_FAIL, "cannot list %s", libdir());
    }
    *best_score = 0;
    struct dirent * e;
    while ((e = readdir(d))) {
        if (!is_variant_file(e->d_name)) {
            continue;
        }
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", libdir(), e->d_name);
        int s = score_variant(p);
        if (s > *best_score) {
            *best_score = s;
            snprintf(path, n, "%s", p);
        }
    }
    closedir(d);
    return *best_score > 0;
}

// variant_path resolves a VARIANT argument to a library path.
void variant_path(const char * want, char * path, size_t n) {
    if (strcmp(want, "native") == 0) {
        int score;
        if (!best_variant(path, n, &score)) {
            die(EXIT_FAIL, "no CPU variant in %s runs on this CPU", libdir());
        }
    } else if (strchr(want, '/')) {
        snprintf(path, n, "%s", want);
    } else {
        snprintf(path, n, "%s/%s%s.so", libdir(), prefix, strcmp(want, "generic") == 0 ? "x64" : want);
    }
}

static void variant_open(const char * want, struct variant * v) {
    variant_path(want, v->path, sizeof(v->path));
    const char * base = strrchr(v->path, '/');
    variant_name(base ? base + 1 : v->path, v->name, sizeof(v->name));
    int s = score_variant(v->path);
    if (s < 0) {
        die(EXIT_USAGE, "CPU variant \"%s\": cannot load %s: %s", want, v->path, dlerror());
    }
    if (s == 0) {
        die(EXIT_USAGE, "CPU variant \"%s\" (%s) does not run on this CPU", want, v->path);
    }
    void * h = dlopen(v->path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        die(EXIT_FAIL, "cannot load %s: %s", v->path, dlerror());
    }
    v->traits = (traits_cpu_fn) dlsym(h, "ggml_get_type_traits_cpu");
    if (!v->traits) {
        die(EXIT_FAIL, "%s has no ggml_get_type_traits_cpu", v->path);
    }
    // Without F16C the scalar code converts fp16 through a table that ggml_cpu_init fills;
    // skipping it makes every fp16 scale read as zero.
    void (*init)(void) = (void (*)(void)) dlsym(h, "ggml_cpu_init");
    if (!init) {
        die(EXIT_FAIL, "%s has no ggml_cpu_init", v->path);
    }
    init();
}

static size_t row_bytes(enum ggml_type t, int64_t n) {
    if (n < 0 || n % ggml_blck_size(t) != 0) {
        die(EXIT_USAGE, "%lld elements is not a whole number of %s blocks (%lld)", (long long) n,
            ggml_type_name(t), (long long) ggml_blck_size(t));
    }
    return ggml_row_size(t, n);
}

int cmd_dequant(int argc, char ** argv) {
    if (argc != 2) {
        die(EXIT_USAGE, "usage: dequant TYPE N");
    }
    enum ggml_type t = arg_type(argv[0]);
    int64_t n = arg_int("N", argv[1]);
    size_t need = row_bytes(t, n);
    const struct ggml_type_traits * tr = ggml_get_type_traits(t);
    if (!tr->to_float) {
        die(EXIT_USAGE, "%s has no to_float", ggml_type_name(t));
    }
    size_t len;
    void * in = read_all(&len);
    if (len != need) {
        die(EXIT_USAGE, "dequant %s N=%lld needs %zu bytes on stdin, got %zu", ggml_type_name(t), (long long) n, need,
            len);
    }
    float * out = malloc((n ? n : 1) * sizeof(float));
    if (!out) {
        die(EXIT_FAIL, "out of memory");
    }
    tr->to_float(in, out, n);
    write_all(out, n * sizeof(float));
    return 0;
}

// quantizable lists the types ggml_quantize_chunk has a case for; it asserts on the rest.
static bool quantizable(enum ggml_type t) {
    switch (t) {
        case GGML_TYPE_Q1_0: case GGML_TYPE_Q2_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0: case GGML_TYPE_MXFP4:
        case GGML_TYPE_NVFP4: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: case GGML_TYPE_TQ1_0: case GGML_TYPE_TQ2_0:
        case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S:
        case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ4_NL:
        case GGML_TYPE_IQ4_XS: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_F32:
            return true;
        default:
            return false;
    }
}

int cmd_quantize(int argc, char ** argv) {
    if (argc != 2 && !(argc == 3 && strcmp(argv[2], "imatrix") == 0)) {
        die(EXIT_USAGE, "usage: quantize TYPE N_PER_ROW [imatrix]");
    }
    enum ggml_type t = arg_type(argv[0]);
    int64_t per_row = arg_int("N_PER_ROW", argv[1]);
    bool with_imatrix = argc == 3;
    if (per_row <= 0) {
        die(EXIT_USAGE, "N_PER_ROW must be positive");
    }
    size_t rs = row_bytes(t, per_row);
    if (!quantizable(t)) {
        die(EXIT_USAGE, "ggml_quantize_chunk does not quantize to %s (for activation types use from_float)",
            ggml_type_name(t));
    }
    if (!with_imatrix && ggml_quantize_requires_imatrix(t)) {
        die(EXIT_USAGE, "%s cannot be quantized without an importance matrix", ggml_type_name(t));
    }
    size_t len;
    float * in = read_all(&len);
    // With imatrix, stdin starts with the N_PER_ROW importance weights.
    const float * imatrix = NULL;
    if (with_imatrix) {
        if (len < per_row * sizeof(float)) {
            die(EXIT_USAGE, "stdin has %zu bytes, less than the %lld-float importance matrix", len, (long long) per_row);
        }
        imatrix = in;
        in += per_row;
        len -= per_row * sizeof(float);
    }
    if (len % (per_row * sizeof(float)) != 0) {
        die(EXIT_USAGE, "stdin has %zu bytes, not a whole number of %lld-element f32 rows", len, (long long) per_row);
    }
    int64_t rows = len / (per_row * sizeof(float));
    void * out = malloc(rows * rs + 1);
    if (!out) {
        die(EXIT_FAIL, "out of memory");
    }
    ggml_quantize_init(t);
    size_t got = rows ? ggml_quantize_chunk(t, in, out, 0, rows, per_row, imatrix) : 0;
    if (got != rows * rs) {
        die(EXIT_FAIL, "ggml_quantize_chunk wrote %zu bytes, expected %zu", got, rows * rs);
    }
    write_all(out, got);
    return 0;
}

int cmd_from_float(int argc, char ** argv) {
    if (argc != 2) {
        die(EXIT_USAGE, "usage: from_float TYPE VARIANT");
    }
    enum ggml_type t = arg_type(argv[0]);
    struct variant v;
    variant_open(argv[1], &v);
    const struct ggml_type_traits_cpu * tr = v.traits(t);
    if (!tr->from_float) {
        die(EXIT_USAGE, "%s has no from_float in CPU variant %s", ggml_type_name(t), v.name);
    }
    size_t len;
    float * in = read_all(&len);
    if (len % sizeof(float) != 0) {
        die(EXIT_USAGE, "stdin has %zu bytes, not a whole number of f32", len);
    }
    int64_t n = len / sizeof(float);
    size_t need = row_bytes(t, n);
    void * out = malloc(need + 1);
    if (!out) {
        die(EXIT_FAIL, "out of memory");
    }
    if (n > 0) {
        tr->from_float(in, out, n);
    }
    write_all(out, need);
    return 0;
}

int cmd_vecdot(int argc, char ** argv) {
    if (argc != 4) {
        die(EXIT_USAGE, "usage: vecdot TYPE N ROWS VARIANT");
    }
    enum ggml_type t = arg_type(argv[0]);
    int64_t n = arg_int("N", argv[1]);
    int64_t rows = arg_int("ROWS", argv[2]);
    if (n <= 0 || rows < 0) {
        die(EXIT_USAGE, "N must be positive and ROWS not negative");
    }
    struct variant v;
    variant_open(argv[3], &v);
    const struct ggml_type_traits_cpu * tr = v.traits(t);
    if (!tr->vec_dot) {
        die(EXIT_USAGE, "%s has no vec_dot in CPU variant %s", ggml_type_name(t), v.name);
    }
    enum ggml_type at = tr->vec_dot_type;
    size_t wrs = row_bytes(t, n), ars = row_bytes(at, n);
    size_t len;
    char * in = read_all(&len);
    if (len != rows * (wrs + ars)) {
        die(EXIT_USAGE,
            "vecdot %s N=%lld ROWS=%lld needs %zu bytes: the %s weight rows (%zu each) then the %s "
            "activation rows (%zu each); got %zu",
            ggml_type_name(t), (long long) n, (long long) rows, rows * (wrs + ars), ggml_type_name(t), wrs,
            ggml_type_name(at), ars, len);
    }
    float * out = malloc((rows ? rows : 1) * sizeof(float));
    if (!out) {
        die(EXIT_FAIL, "out of memory");
    }
    const char * w = in;
    const char * a = in + rows * wrs;
    for (int64_t r = 0; r < rows; r++) {
        tr->vec_dot((int) n, &out[r], 0, w + r * wrs, 0, a + r * ars, 0, 1);
    }
    write_all(out, rows * sizeof(float));
    return 0;
}

int cmd_variants(int argc, char ** argv) {
    (void) argv;
    if (argc != 0) {
        die(EXIT_USAGE, "usage: variants");
    }
    DIR * d = opendir(libdir());
    if (!d) {
        die(EXIT_FAIL, "cannot list %s", libdir());
    }
    char native[4096] = "";
    int best;
    best_variant(native, sizeof(native), &best);
    const char * nb = strrchr(native, '/');
    char nname[256] = "";
    if (nb) {
        variant_name(nb + 1, nname, sizeof(nname));
    }
    printf("{\"libdir\":");
    json_str(libdir(), strlen(libdir()));
    printf(",\"native\":");
    json_str(nname, strlen(nname));
    printf(",\"variants\":[");
    struct dirent * e;
    bool first = true;
    while ((e = readdir(d))) {
        if (!is_variant_file(e->d_name)) {
            continue;
        }
        char p[4096], name[256];
        snprintf(p, sizeof(p), "%s/%s", libdir(), e->d_name);
        variant_name(e->d_name, name, sizeof(name));
        printf("%s{\"name\":", first ? "" : ",");
        json_str(name, strlen(name));
        printf(",\"score\":%d}", score_variant(p));
        first = false;
    }
    closedir(d);
    printf("]}\n");
    return 0;
}

int cmd_types(int argc, char ** argv) {
    if (argc != 1) {
        die(EXIT_USAGE, "usage: types VARIANT");
    }
    struct variant v;
    variant_open(argv[0], &v);
    printf("{\"variant\":");
    json_str(v.name, strlen(v.name));
    printf(",\"types\":[");
    bool first = true;
    for (int i = 0; i < GGML_TYPE_COUNT; i++) {
        enum ggml_type t = (enum ggml_type) i;
        if (ggml_blck_size(t) == 0) {
            continue;
        }
        const struct ggml_type_traits * tr = ggml_get_type_traits(t);
        const struct ggml_type_traits_cpu * ct = v.traits(t);
        printf("%s{\"type\":%d,\"name\":", first ? "" : ",", i);
        json_str(ggml_type_name(t), strlen(ggml_type_name(t)));
        printf(",\"block_size\":%lld,\"type_size\":%zu,\"quantized\":%s,\"to_float\":%s,\"from_float_ref\":%s,"
               "\"quantize_chunk\":%s,\"requires_imatrix\":%s,\"from_float\":%s,\"vec_dot\":%s,\"vec_dot_type\":%d,\"nrows\":%lld}",
               (long long) ggml_blck_size(t), ggml_type_size(t), ggml_is_quantized(t) ? "true" : "false",
               tr->to_float ? "true" : "false", tr->from_float_ref ? "true" : "false",
               quantizable(t) ? "true" : "false", ggml_quantize_requires_imatrix(t) ? "true" : "false", ct->from_float ? "true" : "false",
               ct->vec_dot ? "true" : "false", (int) ct->vec_dot_type, (long long) ct->nrows);
        first = false;
    }
    printf("]}\n");
    return 0;
}
