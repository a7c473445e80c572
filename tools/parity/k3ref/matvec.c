// matvec: the throughput of ggml's CPU backend on a decode-sized matrix ×
// vector, one ggml_mul_mat graph per type computed with a threadpool of N
// threads, for comparison with k3's kernels (go test -bench MatVec) on the
// same machine and threads.
#define _GNU_SOURCE
#include "k3ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

static const char * matvec_usage =
    "matvec [TYPE,TYPE,...] [--rows M] [--cols K] [--threads N] [--seconds S] [--repack] [--cpu VARIANT]";

static const char * default_types = "q2_K,q3_K,q4_K,q5_K,q6_K,q8_0,q4_0,f16,f32";

struct matvec_opts {
    char *       types;
    const char * cpu;
    int          rows, cols, threads;
    double       seconds;
    bool         repack;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_dbl(const void * a, const void * b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static struct matvec_opts matvec_parse(int argc, char ** argv) {
    struct matvec_opts o = {.cpu = "native", .rows = 4096, .cols = 4096, .threads = 1, .seconds = 1.0};
    o.types = strdup(default_types);
    for (int i = 0; i < argc; i++) {
        const char * a = argv[i];
        if (a[0] != '-') {
            free(o.types);
            o.types = strdup(a);
            continue;
        }
        if (strcmp(a, "--repack") == 0) {
            o.repack = true;
            continue;
        }
        if (i + 1 >= argc) {
            die(EXIT_USAGE, "%s needs a value (usage: %s)", a, matvec_usage);
        }
        const char * v = argv[++i];
        if (strcmp(a, "--rows") == 0) {
            o.rows = (int) arg_int(a, v);
        } else if (strcmp(a, "--cols") == 0) {
            o.cols = (int) arg_int(a, v);
        } else if (strcmp(a, "--threads") == 0) {
            o.threads = (int) arg_int(a, v);
        } else if (strcmp(a, "--cpu") == 0) {
            o.cpu = v;
        } else if (strcmp(a, "--seconds") == 0) {
            char * end;
            o.seconds = strtod(v, &end);
            if (*end || end == v || !(o.seconds > 0 && o.seconds <= 600)) {
                die(EXIT_USAGE, "--seconds: \"%s\" is not in (0, 600]", v);
            }
        } else {
            die(EXIT_USAGE, "unknown option \"%s\" (usage: %s)", a, matvec_usage);
        }
    }
    if (o.rows < 1 || o.cols < 1 || o.threads < 1 || (int64_t) o.rows * o.cols > (int64_t) 1 << 32) {
        die(EXIT_USAGE, "--rows, --cols and --threads must be positive and rows×cols at most 2^32");
    }
    return o;
}

// repack_buft is the CPU backend's CPU_REPACK buffer type, or NULL.
static ggml_backend_buffer_type_t repack_buft(ggml_backend_reg_t reg, ggml_backend_dev_t dev) {
    ggml_backend_dev_get_extra_bufts_t get = ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!get) {
        return NULL;
    }
    for (ggml_backend_buffer_type_t * b = get(dev); b && *b; b++) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) {
            return *b;
        }
    }
    return NULL;
}

// weights returns rows×cols random weights of type t: a block of up to 256
// rows quantized once and tiled (the values do not change the time, and
// quantizing 16M elements per type would take longer than the measurement).
static void * weights(enum ggml_type t, int rows, int cols, size_t * size) {
    int part = rows < 256 ? rows : 256;
    float * src = malloc(sizeof(float) * (size_t) part * cols);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t) t;
    for (size_t i = 0; i < (size_t) part * cols; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        src[i] = (float) ((int64_t) (s >> 11) - (1ll << 52)) / (float) (1ll << 52);
    }
    size_t row = ggml_row_size(t, cols);
    char * w = malloc(row * rows);
    if (!src || !w) {
        die(EXIT_FAIL, "out of memory for %d×%d %s weights", rows, cols, ggml_type_name(t));
    }
    // The types llama-quantize refuses without an importance matrix
    // (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS) get a uniform one: the values do not
    // change the time either.
    float * imatrix = NULL;
    if (ggml_quantize_requires_imatrix(t)) {
        imatrix = malloc(sizeof(float) * (size_t) cols);
        if (!imatrix) {
            die(EXIT_FAIL, "out of memory for %s's importance matrix", ggml_type_name(t));
        }
        for (int i = 0; i < cols; i++) {
            imatrix[i] = 1.0f;
        }
    }
    ggml_quantize_chunk(t, src, w, 0, part, cols, imatrix);
    free(imatrix);
    for (int r = part; r < rows; r += part) {
        memcpy(w + row * r, w, row * (size_t) (rows - r < part ? rows - r : part));
    }
    free(src);
    *size = row * rows;
    return w;
}

// matvec_one times one type and prints its JSON object.
static void matvec_one(ggml_backend_t be, ggml_backend_buffer_type_t rbuft, enum ggml_type t,
                       const struct matvec_opts * o, bool first) {
    if (o->cols % ggml_blck_size(t) != 0) {
        die(EXIT_USAGE, "--cols %d is not a multiple of %s's block (%lld)", o->cols, ggml_type_name(t),
            (long long) ggml_blck_size(t));
    }
    struct ggml_init_params ip = {.mem_size = ggml_tensor_overhead() * 8 + ggml_graph_overhead(), .no_alloc = true};
    struct ggml_context * cw = ggml_init(ip), * cx = ggml_init(ip);
    struct ggml_tensor * w = ggml_new_tensor_2d(cw, t, o->cols, o->rows);
    struct ggml_tensor * x = ggml_new_tensor_2d(cx, GGML_TYPE_F32, o->cols, 1);
    struct ggml_tensor * y = ggml_mul_mat(cx, w, x);
    ggml_backend_buffer_t bw = NULL;
    bool repacked = false;
    if (rbuft) {
        bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, rbuft);
        // The repack buffer type leaves extra NULL for a type it has no layout for.
        repacked = bw && w->extra;
        if (bw && !repacked) {
            ggml_backend_buffer_free(bw);
            w->buffer = NULL, w->data = NULL;
            bw = NULL;
        }
    }
    if (!bw) {
        bw = ggml_backend_alloc_ctx_tensors(cw, be);
    }
    ggml_backend_buffer_t bx = ggml_backend_alloc_ctx_tensors(cx, be);
    if (!bw || !bx) {
        die(EXIT_FAIL, "allocating %s tensors failed", ggml_type_name(t));
    }
    size_t wbytes;
    void * wdata = weights(t, o->rows, o->cols, &wbytes);
    ggml_backend_tensor_set(w, wdata, 0, wbytes);
    free(wdata);
    float * xv = malloc(sizeof(float) * o->cols);
    for (int i = 0; i < o->cols; i++) {
        xv[i] = (float) ((i * 7919) % 1000) / 1000.0f - 0.5f;
    }
    ggml_backend_tensor_set(x, xv, 0, sizeof(float) * o->cols);
    free(xv);
    struct ggml_cgraph * g = ggml_new_graph(cx);
    ggml_build_forward_expand(g, y);
    for (int i = 0; i < 3; i++) { // warm-up: caches, threadpool, page faults
        if (ggml_backend_graph_compute(be, g) != GGML_STATUS_SUCCESS) {
            die(EXIT_FAIL, "ggml_backend_graph_compute of %s failed", ggml_type_name(t));
        }
    }
    size_t cap = 1024, n = 0;
    double * times = malloc(sizeof(double) * cap), start = mono_s();
    while (n < 5 || (mono_s() - start < o->seconds && n < 100000)) {
        double t0 = mono_s();
        ggml_backend_graph_compute(be, g);
        if (n == cap) {
            cap *= 2;
            times = realloc(times, sizeof(double) * cap);
        }
        times[n++] = mono_s() - t0;
    }
    double mean = 0;
    for (size_t i = 0; i < n; i++) {
        mean += times[i] / n;
    }
    qsort(times, n, sizeof(double), cmp_dbl);
    double best = times[0], med = times[n / 2];
    printf("%s{\"type\":\"%s\",\"weight_bytes\":%zu,\"repacked\":%s,\"reps\":%zu,\"best_us\":%.3f,\"median_us\":%.3f,"
           "\"mean_us\":%.3f,\"gbps_best\":%.4f,\"gbps_median\":%.4f,\"gbps_mean\":%.4f}",
           first ? "" : ",", ggml_type_name(t), wbytes, repacked ? "true" : "false", n, best * 1e6, med * 1e6,
           mean * 1e6, wbytes / best / 1e9, wbytes / med / 1e9, wbytes / mean / 1e9);
    free(times);
    ggml_backend_buffer_free(bw);
    ggml_backend_buffer_free(bx);
    ggml_free(cw);
    ggml_free(cx);
}

int cmd_matvec(int argc, char ** argv) {
    struct matvec_opts o = matvec_parse(argc, argv);
    char path[4096];
    variant_path(o.cpu, path, sizeof(path));
    ggml_backend_reg_t reg = ggml_backend_load(path);
    if (!reg) {
        die(EXIT_USAGE, "cannot load CPU variant \"%s\" (%s)", o.cpu, path);
    }
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    ggml_backend_t be = ggml_backend_dev_init(dev, NULL);
    if (!be) {
        die(EXIT_FAIL, "cannot start the CPU backend of %s", path);
    }
    struct ggml_threadpool * (*tp_new)(struct ggml_threadpool_params *) =
        ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
    void (*set_tp)(ggml_backend_t, struct ggml_threadpool *) =
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_cpu_set_threadpool");
    ggml_backend_set_n_threads_t set_n = ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (!tp_new || !set_tp || !set_n) {
        die(EXIT_FAIL, "%s lacks the threadpool functions", path);
    }
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(o.threads);
    struct ggml_threadpool * tp = tp_new(&tpp);
    if (!tp) {
        die(EXIT_FAIL, "ggml_threadpool_new(%d) failed", o.threads);
    }
    set_n(be, o.threads);
    set_tp(be, tp);
    ggml_backend_buffer_type_t rbuft = o.repack ? repack_buft(reg, dev) : NULL;
    if (o.repack && !rbuft) {
        die(EXIT_FAIL, "%s has no CPU_REPACK buffer type", path);
    }
    enum ggml_type types[GGML_TYPE_COUNT];
    int ntypes = 0;
    for (char * save = NULL, * tok = strtok_r(o.types, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (ntypes == GGML_TYPE_COUNT) {
            die(EXIT_USAGE, "too many types");
        }
        types[ntypes++] = arg_type(tok);
    }
    const char * base = strrchr(path, '/');
    printf("{\"cpu_variant\":");
    json_str(base ? base + 1 : path, strlen(base ? base + 1 : path));
    printf(",\"threads\":%d,\"rows\":%d,\"cols\":%d,\"repack\":%s,\"results\":[", o.threads, o.rows, o.cols,
           o.repack ? "true" : "false");
    for (int i = 0; i < ntypes; i++) {
        matvec_one(be, rbuft, types[i], &o, i == 0);
        fflush(stdout);
    }
    printf("]}\n");
    ggml_backend_free(be);
    void (*tp_free)(struct ggml_threadpool *) = ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
    if (tp_free) {
        tp_free(tp);
    }
    return 0;
}
