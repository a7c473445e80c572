// quantize-model: llama_model_quantize, what llama-quantize runs, with an
// optional importance matrix and tensor-type overrides.
#define _GNU_SOURCE
#include "k3ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

// read_imatrix loads an importance matrix file: records of u32 name length,
// the name, u32 count and count f32 (little-endian), as k3's parity package
// writes them. The returned array ends with a {NULL} entry.
static struct llama_model_imatrix_data * read_imatrix(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) {
        die(EXIT_USAGE, "cannot open imatrix %s", path);
    }
    size_t n = 0, cap = 16;
    struct llama_model_imatrix_data * d = calloc(cap, sizeof(*d));
    for (;;) {
        uint32_t len;
        if (fread(&len, 4, 1, f) != 1) {
            break;
        }
        if (len == 0 || len > 4096) {
            die(EXIT_USAGE, "imatrix %s: bad name length %u in record %zu", path, len, n);
        }
        char * name = calloc(len + 1, 1);
        uint32_t count;
        if (!name || fread(name, 1, len, f) != len || fread(&count, 4, 1, f) != 1) {
            die(EXIT_USAGE, "imatrix %s: truncated record %zu", path, n);
        }
        float * data = malloc((size_t) count * sizeof(float) + 1);
        if (!data || fread(data, sizeof(float), count, f) != count) {
            die(EXIT_USAGE, "imatrix %s: record %zu (%s): truncated data", path, n, name);
        }
        if (n + 1 >= cap) {
            cap *= 2;
            d = realloc(d, cap * sizeof(*d));
            if (!d) {
                die(EXIT_FAIL, "out of memory");
            }
        }
        d[n++] = (struct llama_model_imatrix_data) {.name = name, .data = data, .size = count};
    }
    fclose(f);
    d[n] = (struct llama_model_imatrix_data) {0};
    return d;
}

int cmd_quantize_model(int argc, char ** argv) {
    if (argc < 3) {
        die(EXIT_USAGE, "usage: quantize-model IN OUT FTYPE [--imatrix FILE] [--type REGEX=TYPE]... [--threads N]");
    }
    struct llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype) arg_int("FTYPE", argv[2]);
    p.nthread = 1;
    struct llama_model_tensor_override * tt = calloc(argc + 1, sizeof(*tt));
    int ntt = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--imatrix") == 0 && i + 1 < argc) {
            p.imatrix = read_imatrix(argv[++i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            p.nthread = (int) arg_int("--threads", argv[++i]);
        } else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            char * spec = strdup(argv[++i]);
            char * eq = strrchr(spec, '=');
            if (!eq || eq == spec) {
                die(EXIT_USAGE, "--type %s: want REGEX=TYPE", spec);
            }
            *eq = 0;
            tt[ntt++] = (struct llama_model_tensor_override) {.pattern = spec, .type = arg_type(eq + 1)};
        } else {
            die(EXIT_USAGE, "quantize-model: unknown option %s", argv[i]);
        }
    }
    if (ntt > 0) {
        p.tt_overrides = tt;
    }
    llama_backend_init();
    uint32_t rc = llama_model_quantize(argv[0], argv[1], &p);
    if (rc != 0) {
        die(EXIT_FAIL, "llama_model_quantize %s -> %s failed (%u)", argv[0], argv[1], rc);
    }
    return 0;
}
