// Throughput subcommands: bench (a model's prefill and decode tokens/s, as
// llama-bench measures them) and matvec (one ggml_mul_mat of a weight matrix
// by a vector on ggml's CPU backend, per type). Both print one JSON object.
#define _GNU_SOURCE
#include "k3ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "llama.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// xorshift keeps the token and weight streams the same on every run.
static uint64_t rnd(uint64_t * s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

// print_stat writes "name":{"mean":..,"sd":..,"runs":[..]} (sample sd).
static void print_stat(const char * name, const double * v, int n) {
    double sum = 0, ss = 0;
    for (int i = 0; i < n; i++) {
        sum += v[i];
    }
    double mean = n ? sum / n : 0;
    for (int i = 0; i < n; i++) {
        ss += (v[i] - mean) * (v[i] - mean);
    }
    printf("\"%s\":{\"mean\":%.6g,\"sd\":%.6g,\"runs\":[", name, mean, n > 1 ? sqrt(ss / (n - 1)) : 0.0);
    for (int i = 0; i < n; i++) {
        printf("%s%.6g", i ? "," : "", v[i]);
    }
    printf("]}");
}

// cpu_backend loads one CPU variant (or, for "native", every library in the
// directory, so ggml picks the best) and returns the CPU backend's registry.
static ggml_backend_reg_t cpu_backend(const char * cpu, char * name, size_t n) {
    char path[4096];
    variant_path(cpu, path, sizeof(path));
    if (!ggml_backend_load(path)) {
        die(EXIT_USAGE, "cannot load CPU variant \"%s\" (%s)", cpu, path);
    }
    const char * base = strrchr(path, '/');
    snprintf(name, n, "%.200s", base ? base + 1 : path);
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    if (!reg) {
        die(EXIT_FAIL, "no CPU backend after loading %s", path);
    }
    return reg;
}

static struct ggml_threadpool * new_threadpool(ggml_backend_reg_t reg, int threads, int poll) {
    struct ggml_threadpool * (*tp_new)(struct ggml_threadpool_params *) =
        ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
    if (!tp_new) {
        die(EXIT_FAIL, "the CPU backend has no ggml_threadpool_new");
    }
    struct ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    tpp.poll = (uint32_t) poll;
    struct ggml_threadpool * tp = tp_new(&tpp);
    if (!tp) {
        die(EXIT_FAIL, "ggml_threadpool_new(%d threads) failed", threads);
    }
    return tp;
}

static void free_threadpool(ggml_backend_reg_t reg, struct ggml_threadpool * tp) {
    void (*tp_free)(struct ggml_threadpool *) = ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
    if (tp_free) {
        tp_free(tp);
    }
}

// --- bench ---

struct bench_opts {
    const char * model;
    const char * cpu;
    int          threads, prompt, gen, reps, ubatch, poll;
    bool         no_repack, warmup;
    uint64_t     seed;
};

static const char * bench_usage =
    "bench MODEL [--threads N] [-p N] [-n N] [--reps N] [--batch N] [--no-repack] [--no-warmup] [--cpu VARIANT] "
    "[--seed N] [--poll 0..100]";

static struct bench_opts bench_parse(int argc, char ** argv) {
    struct bench_opts o = {.cpu = "native", .threads = 1, .prompt = 64, .gen = 32, .reps = 3, .ubatch = 512,
                           .warmup = true, .seed = 1, .poll = 50};
    if (argc < 1) {
        die(EXIT_USAGE, "usage: %s", bench_usage);
    }
    o.model = argv[0];
    for (int i = 1; i < argc; i++) {
        const char * a = argv[i];
        if (strcmp(a, "--no-repack") == 0) {
            o.no_repack = true;
            continue;
        }
        if (strcmp(a, "--no-warmup") == 0) {
            o.warmup = false;
            continue;
        }
        if (i + 1 >= argc) {
            die(EXIT_USAGE, "%s needs a value (usage: %s)", a, bench_usage);
        }
        const char * v = argv[++i];
        if (strcmp(a, "--threads") == 0) {
            o.threads = (int) arg_int(a, v);
        } else if (strcmp(a, "-p") == 0) {
            o.prompt = (int) arg_int(a, v);
        } else if (strcmp(a, "-n") == 0) {
            o.gen = (int) arg_int(a, v);
        } else if (strcmp(a, "--reps") == 0) {
            o.reps = (int) arg_int(a, v);
        } else if (strcmp(a, "--batch") == 0) {
            o.ubatch = (int) arg_int(a, v);
        } else if (strcmp(a, "--cpu") == 0) {
            o.cpu = v;
        } else if (strcmp(a, "--poll") == 0) {
            o.poll = (int) arg_int(a, v);
        } else if (strcmp(a, "--seed") == 0) {
            o.seed = (uint64_t) arg_int(a, v);
        } else {
            die(EXIT_USAGE, "unknown option \"%s\" (usage: %s)", a, bench_usage);
        }
    }
    if (o.threads < 1 || o.prompt < 1 || o.gen < 0 || o.reps < 1 || o.ubatch < 1 || o.prompt > 1 << 20 ||
        o.gen > 1 << 20 || o.reps > 10000 || o.poll < 0 || o.poll > 100) {
        die(EXIT_USAGE, "--threads, -p, --reps and --batch must be positive, -n not negative, --poll in 0..100");
    }
    if (o.seed == 0) {
        o.seed = 1;
    }
    return o;
}

// bench_run clears the sequence, evaluates prompt random tokens in one
// llama_decode (split in ubatches by llama.cpp) and then gen single-token
// steps of random tokens, as llama-bench's pp and tg tests do.
static void bench_run(struct llama_context * c, int nv, const struct bench_opts * o, int gen, uint64_t * seed,
                      double * t_prompt, double * t_gen) {
    llama_memory_clear(llama_get_memory(c), true);
    struct llama_batch b = llama_batch_init(o->prompt, 0, 1);
    for (int i = 0; i < o->prompt; i++) {
        b.token[i] = (llama_token) (rnd(seed) % (uint64_t) nv);
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == o->prompt - 1;
    }
    b.n_tokens = o->prompt;
    double t0 = now_s();
    int32_t rc = llama_decode(c, b);
    llama_synchronize(c);
    *t_prompt = now_s() - t0;
    llama_batch_free(b);
    if (rc != 0) {
        die(EXIT_FAIL, "llama_decode of %d prompt tokens returned %d", o->prompt, rc);
    }
    t0 = now_s();
    for (int i = 0; i < gen; i++) {
        llama_token tok = (llama_token) (rnd(seed) % (uint64_t) nv);
        rc = llama_decode(c, llama_batch_get_one(&tok, 1));
        if (rc != 0) {
            die(EXIT_FAIL, "llama_decode of decode step %d returned %d", i + 1, rc);
        }
    }
    llama_synchronize(c);
    *t_gen = now_s() - t0;
}

int cmd_bench(int argc, char ** argv) {
    struct bench_opts o = bench_parse(argc, argv);
    char variant[256];
    ggml_backend_reg_t reg = cpu_backend(o.cpu, variant, sizeof(variant));
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = !o.no_repack;
    double t0 = now_s();
    struct llama_model * m = llama_model_load_from_file(o.model, mp);
    if (!m) {
        die(EXIT_REJECTED, "llama_model_load_from_file failed for %s", o.model);
    }
    double load_s = now_s() - t0;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t) (o.prompt + o.gen);
    cp.n_batch = (uint32_t) o.prompt;
    cp.n_ubatch = (uint32_t) (o.ubatch < o.prompt ? o.ubatch : o.prompt);
    cp.n_seq_max = 1;
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    struct llama_context * c = llama_init_from_model(m, cp);
    if (!c) {
        die(EXIT_FAIL, "llama_init_from_model failed (n_ctx %u)", cp.n_ctx);
    }
    struct ggml_threadpool * tp = new_threadpool(reg, o.threads, o.poll);
    llama_attach_threadpool(c, tp, NULL);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    uint64_t seed = o.seed;
    double tp_s, tg_s;
    if (o.warmup) {
        bench_run(c, nv, &o, o.gen > 0 ? 1 : 0, &seed, &tp_s, &tg_s);
    }
    double * pre = calloc(o.reps, sizeof(double)), * dec = calloc(o.reps, sizeof(double));
    for (int r = 0; r < o.reps; r++) {
        bench_run(c, nv, &o, o.gen, &seed, &tp_s, &tg_s);
        pre[r] = o.prompt / tp_s;
        dec[r] = o.gen > 0 ? o.gen / tg_s : 0;
    }
    printf("{\"prompt_tokens\":%d,\"decode_tokens\":%d,\"reps\":%d,\"threads\":%d,\"ubatch\":%u,\"poll\":%d,\"repack\":%s,"
           "\"cpu_variant\":",
           o.prompt, o.gen, o.reps, o.threads, cp.n_ubatch, o.poll, o.no_repack ? "false" : "true");
    json_str(variant, strlen(variant));
    printf(",\"load_s\":%.6g,\"model_bytes\":%llu,\"n_params\":%llu,", load_s,
           (unsigned long long) llama_model_size(m), (unsigned long long) llama_model_n_params(m));
    print_stat("prefill_tok_s", pre, o.reps);
    putchar(',');
    print_stat("decode_tok_s", dec, o.gen > 0 ? o.reps : 0);
    printf(",\"system_info\":");
    const char * si = llama_print_system_info();
    json_str(si, strlen(si));
    printf("}\n");
    llama_detach_threadpool(c);
    free_threadpool(reg, tp);
    llama_free(c);
    llama_model_free(m);
    return 0;
}
