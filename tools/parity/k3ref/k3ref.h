// k3ref: the llama.cpp reference tool behind k3's parity tests (see ../parity.go).
// Every subcommand reads its bulk input from stdin, writes its result to stdout
// and reports failures on stderr with a non-zero exit status.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml.h"

// Exit statuses the Go client tells apart.
enum {
    EXIT_USAGE    = 2, // bad arguments or input
    EXIT_FAIL     = 1, // llama.cpp/ggml failed on valid input
    EXIT_REJECTED = 3, // llama.cpp refused the model file (load error)
};

// die prints "k3ref: <msg>" and the tail of the captured ggml/llama log, then exits.
__attribute__((noreturn, format(printf, 2, 3))) void die(int status, const char * fmt, ...);

// Captured ggml/llama log lines (printed on failure, or live with K3REF_VERBOSE=1).
void log_capture_install(void);

// read_all reads stdin to EOF.
void * read_all(size_t * n);
void write_all(const void * p, size_t n);

// Argument parsing helpers; they die with a usage error on bad input.
int64_t arg_int(const char * what, const char * s);
enum ggml_type arg_type(const char * s);
const char * libdir(void);

// JSON output helpers (stdout).
void json_str(const char * s, size_t n);

int cmd_dequant(int argc, char ** argv);
int cmd_quantize(int argc, char ** argv);
int cmd_from_float(int argc, char ** argv);
int cmd_vecdot(int argc, char ** argv);
int cmd_variants(int argc, char ** argv);
int cmd_types(int argc, char ** argv);
int cmd_meta(int argc, char ** argv);
int cmd_load(int argc, char ** argv);
int cmd_logits(int argc, char ** argv);
int cmd_greedy(int argc, char ** argv);
int cmd_tokenize(int argc, char ** argv);
int cmd_detokenize(int argc, char ** argv);
int cmd_pieces(int argc, char ** argv);
int cmd_bench(int argc, char ** argv);  // bench.c
int cmd_matvec(int argc, char ** argv); // matvec.c
int cmd_quantize_model(int argc, char ** argv); // quantize_model.c
// variant_path resolves a VARIANT argument (generic, native, a name or a path) to a library path.
void variant_path(const char * want, char * path, size_t n);
