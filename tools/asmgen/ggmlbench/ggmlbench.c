// ggmlbench times llama.cpp's CPU vec_dot kernels on the same shapes as
// k3's Go benchmarks (BenchmarkDot: one 4096-element row hot in cache;
// BenchmarkMatVec/t1: 4096 rows of 4096, one thread), so that k3's kernels
// can be compared with ggml's on one machine. It is a measurement tool, not
// part of k3 (k3 stays pure Go). Build and run:
//
//	L=tools/parity/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
//	gcc -O2 -I/work/llama.cpp-src/ggml/include tools/asmgen/ggmlbench/ggmlbench.c \
//	    -o /tmp/ggmlbench -ldl -L$L -lggml-base -Wl,-rpath,$L
//	/tmp/ggmlbench $L/libggml-cpu-zen4.so
//
// Output: one line per type: type, ns per hot row, GB/s, ns per matvec, GB/s
// (minimum over repetitions).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

typedef const struct ggml_type_traits_cpu * (*traits_fn)(enum ggml_type);

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static float frand(unsigned * s) {
    // Sum of uniforms: roughly normal, enough for benchmark data.
    float x = 0;
    for (int i = 0; i < 4; i++) {
        *s = *s * 1664525u + 1013904223u;
        x += (float) (*s >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ggmlbench libggml-cpu-VARIANT.so\n");
        return 2;
    }
    void * h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    traits_fn traits = (traits_fn) dlsym(h, "ggml_get_type_traits_cpu");
    void (*init)(void) = (void (*)(void)) dlsym(h, "ggml_cpu_init");
    init();
    const int n = 4096, rows = 4096;
    enum ggml_type types[] = { GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q6_K,  GGML_TYPE_Q4_K,
                               GGML_TYPE_Q5_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,  GGML_TYPE_Q5_0,
                               GGML_TYPE_MXFP4, GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
    float * src = malloc(sizeof(float) * n * rows);
    unsigned seed = 1;
    for (size_t i = 0; i < (size_t) n * rows; i++) {
        src[i] = frand(&seed);
    }
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        enum ggml_type t = types[k];
        const struct ggml_type_traits_cpu * tr = traits(t);
        size_t wrow = ggml_row_size(t, n), arow = ggml_row_size(tr->vec_dot_type, n);
        char * w = malloc(wrow * rows);
        char * a = malloc(arow);
        ggml_quantize_chunk(t, src, w, 0, rows, n, NULL);
        if (tr->vec_dot_type == GGML_TYPE_F32) {
            memcpy(a, src, arow);
        } else {
            traits(tr->vec_dot_type)->from_float(src, a, n);
        }
        float out, * outs = malloc(sizeof(float) * rows);
        double best_dot = 1e30, best_mv = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            const int iters = 20000;
            double t0 = now_ns();
            for (int i = 0; i < iters; i++) {
                tr->vec_dot(n, &out, 0, w, 0, a, 0, 1);
                __asm__ volatile("" : : "g"(&out) : "memory");
            }
            double dt = (now_ns() - t0) / iters;
            if (dt < best_dot) best_dot = dt;
            for (int m = 0; m < 10; m++) {
                t0 = now_ns();
                for (int r = 0; r < rows; r++) {
                    tr->vec_dot(n, &outs[r], 0, w + r * wrow, 0, a, 0, 1);
                }
                dt = now_ns() - t0;
                if (dt < best_mv) best_mv = dt;
            }
        }
        printf("%-5s dot %8.0f ns %7.2f GB/s   matvec %10.0f ns %7.2f GB/s\n", ggml_type_name(t), best_dot,
               wrow / best_dot, best_mv, wrow * rows / best_mv);
        free(w);
        free(a);
        free(outs);
    }
    return 0;
}
