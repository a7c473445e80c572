// k3ref entry point and the helpers every subcommand shares.
#define _GNU_SOURCE
#include "k3ref.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "llama.h"

static const char * usage =
    "usage: k3ref COMMAND [ARGS]   (bulk input on stdin, result on stdout)\n"
    "  dequant TYPE N                   stdin: N elements of TYPE; stdout: N f32 (to_float)\n"
    "  quantize TYPE N_PER_ROW [imatrix]  stdin: f32 rows (after N_PER_ROW importance weights with\n"
    "                                   imatrix); stdout: TYPE rows (ggml_quantize_chunk)\n"
    "  from_float TYPE VARIANT          stdin: f32; stdout: TYPE (CPU traits from_float)\n"
    "  vecdot TYPE N ROWS VARIANT       stdin: ROWS weight rows of TYPE then ROWS rows of its\n"
    "                                   vec_dot_type; stdout: ROWS f32 (CPU traits vec_dot)\n"
    "  variants                         JSON: CPU variants, their scores, the native one\n"
    "  types VARIANT                    JSON: every type's sizes and CPU traits\n"
    "  meta MODEL                       JSON: every GGUF KV and tensor info (gguf_*)\n"
    "  load MODEL                       JSON: n_vocab, n_layer, ... (exit 3 if rejected)\n"
    "  logits MODEL [opts]              stdin: i32 tokens; stdout: u32 rows, u32 n_vocab, f32s\n"
    "  greedy MODEL N [opts]            stdin: i32 tokens; JSON: generated tokens\n"
    "  tokenize MODEL [--add-special] [--parse-special]        stdin: text; JSON: tokens\n"
    "           --many: stdin: texts, each u32 length + bytes; JSON: token lists\n"
    "  detokenize MODEL [--remove-special] [--unparse-special] stdin: i32 tokens; stdout: text\n"
    "  pieces MODEL [--special]         stdin: i32 tokens; stdout: per token u32 len + bytes\n"
    "  bench MODEL [-p N] [-n N] [--reps N] [--threads N] [--batch N] [--no-repack] [--no-warmup]\n"
    "        [--cpu VARIANT] [--seed N] [--poll 0..100]  JSON: prefill and decode tok/s, llama-bench style\n"
    "  matvec [TYPE,...] [--rows M] [--cols K] [--threads N] [--seconds S] [--repack] [--cpu VARIANT]\n"
    "                                   JSON: one ggml_mul_mat by a vector per type, GB/s of weights\n"
    "  quantize-model IN OUT FTYPE [--imatrix FILE] [--type REGEX=TYPE]... [--threads N]\n"
    "                                   llama_model_quantize (llama-quantize) to llama_ftype FTYPE;\n"
    "                                   imatrix records: u32 name len, name, u32 n, n f32\n"
    "  version                          prints the llama.cpp system info\n"
    "VARIANT: generic (libggml-cpu-x64.so, scalar C), native (best scoring variant), a\n"
    "variant name (haswell, zen4, ...) or a path to a libggml-cpu-*.so.\n"
    "model opts: --threads N --batch N (n_ubatch) --ctx N --all --flash-attn auto|on|off\n"
    "            --cpu VARIANT (default native) --no-repack (no CPU_REPACK weight layouts)\n"
    "env: K3REF_VERBOSE=1 prints llama.cpp/ggml logs to stderr.\n";

// --- log capture ---

// A log tail: the last bytes written, cut at line starts when printed.
struct tail {
    char   buf[16384];
    size_t len;
};

static struct tail log_all, log_bad; // every line; warnings and errors only
static bool        log_verbose;
static int         log_level = GGML_LOG_LEVEL_INFO;

static void tail_add(struct tail * t, const char * text) {
    size_t n = strlen(text);
    if (n >= sizeof(t->buf)) {
        text += n - (sizeof(t->buf) - 1);
        n = sizeof(t->buf) - 1;
    }
    if (t->len + n >= sizeof(t->buf)) {
        size_t drop = t->len + n - (sizeof(t->buf) - 1);
        memmove(t->buf, t->buf + drop, t->len - drop);
        t->len -= drop;
    }
    memcpy(t->buf + t->len, text, n);
    t->len += n;
    t->buf[t->len] = 0;
}

// tail_last returns the start of the last n lines of t.
static const char * tail_last(const struct tail * t, int n) {
    int lines = 0;
    for (const char * q = t->buf + t->len; q > t->buf; q--) {
        if (q[-1] == '\n' && q != t->buf + t->len && ++lines >= n) {
            return q;
        }
    }
    return t->buf;
}

static void log_cb(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    if (level != GGML_LOG_LEVEL_CONT) {
        log_level = level;
    }
    if (log_verbose) {
        fputs(text, stderr);
    }
    tail_add(&log_all, text);
    if (log_level == GGML_LOG_LEVEL_WARN || log_level == GGML_LOG_LEVEL_ERROR) {
        tail_add(&log_bad, text);
    }
}

void log_capture_install(void) {
    const char * v = getenv("K3REF_VERBOSE");
    log_verbose = v && *v && strcmp(v, "0") != 0;
    ggml_log_set(log_cb, NULL);
    llama_log_set(log_cb, NULL);
}

void die(int status, const char * fmt, ...) {
    fflush(stdout);
    fputs("k3ref: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (!log_verbose) {
        // llama.cpp's own reason is in its last warnings and errors.
        const struct tail * t = log_bad.len > 0 ? &log_bad : &log_all;
        if (t->len > 0) {
            fprintf(stderr, "k3ref: llama.cpp log (%s):\n%s", t == &log_bad ? "last warnings and errors" : "last lines",
                    tail_last(t, 8));
        }
    }
    exit(status);
}

// --- I/O ---

void * read_all(size_t * n) {
    size_t cap = 1 << 16, len = 0;
    char * buf = malloc(cap);
    if (!buf) {
        die(EXIT_FAIL, "out of memory");
    }
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) {
                die(EXIT_FAIL, "out of memory reading stdin (%zu bytes)", len);
            }
        }
        ssize_t r = read(0, buf + len, cap - len);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            die(EXIT_FAIL, "reading stdin: %s", strerror(errno));
        }
        if (r == 0) {
            break;
        }
        len += (size_t) r;
    }
    *n = len;
    return buf;
}

void write_all(const void * p, size_t n) {
    if (n > 0 && fwrite(p, 1, n, stdout) != n) {
        die(EXIT_FAIL, "writing stdout: %s", strerror(errno));
    }
}

// --- arguments ---

int64_t arg_int(const char * what, const char * s) {
    char * end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        die(EXIT_USAGE, "%s: not an integer: \"%s\"", what, s);
    }
    return v;
}

enum ggml_type arg_type(const char * s) {
    char * end;
    long v = strtol(s, &end, 10);
    if (end != s && !*end) {
        if (v < 0 || v >= GGML_TYPE_COUNT || ggml_blck_size((enum ggml_type) v) == 0) {
            die(EXIT_USAGE, "unknown ggml type %ld", v);
        }
        return (enum ggml_type) v;
    }
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        if (ggml_blck_size((enum ggml_type) t) == 0) {
            continue; // removed types keep their number but have no traits
        }
        const char * name = ggml_type_name((enum ggml_type) t);
        if (name && strcasecmp(name, s) == 0) {
            return (enum ggml_type) t;
        }
    }
    die(EXIT_USAGE, "unknown ggml type \"%s\"", s);
}

const char * libdir(void) {
    static char dir[4096];
    if (dir[0]) {
        return dir;
    }
    const char * env = getenv("K3REF_LIBDIR");
    if (env && *env) {
        snprintf(dir, sizeof(dir), "%s", env);
        return dir;
    }
    // The directory libggml-base.so was loaded from holds the CPU variants too.
    Dl_info info;
    if (!dladdr((void *) ggml_type_name, &info) || !info.dli_fname) {
        die(EXIT_FAIL, "cannot locate libggml-base.so; set K3REF_LIBDIR");
    }
    char tmp[4096];
    if (!realpath(info.dli_fname, tmp)) {
        snprintf(tmp, sizeof(tmp), "%s", info.dli_fname);
    }
    snprintf(dir, sizeof(dir), "%s", dirname(tmp));
    return dir;
}

// --- JSON ---

// utf8_valid follows Go's utf8.Valid: no overlongs, surrogates or code points past U+10FFFF.
static bool utf8_valid(const unsigned char * s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n) {
            return false;
        }
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

// json_str writes s as a JSON string, or as {"hex":"..."} when it is not valid
// UTF-8, so that the Go side gets the exact bytes back either way.
void json_str(const char * s, size_t n) {
    const unsigned char * u = (const unsigned char *) s;
    if (!utf8_valid(u, n)) {
        fputs("{\"hex\":\"", stdout);
        for (size_t i = 0; i < n; i++) {
            printf("%02x", u[i]);
        }
        fputs("\"}", stdout);
        return;
    }
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
        } else if (c < 0x20 || c == 0x7f) {
            printf("\\u%04x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

// --- main ---

static const struct {
    const char * name;
    int (*fn)(int, char **);
} cmds[] = {
    {"dequant", cmd_dequant},       {"quantize", cmd_quantize},     {"from_float", cmd_from_float},
    {"vecdot", cmd_vecdot},         {"variants", cmd_variants},     {"types", cmd_types},
    {"meta", cmd_meta},             {"load", cmd_load},             {"logits", cmd_logits},
    {"greedy", cmd_greedy},         {"tokenize", cmd_tokenize},     {"detokenize", cmd_detokenize},
    {"pieces", cmd_pieces},         {"bench", cmd_bench},           {"matvec", cmd_matvec},
    {"quantize-model", cmd_quantize_model},
};

int main(int argc, char ** argv) {
    log_capture_install();
    if (!getenv("K3REF_VERBOSE")) {
        // On an assert ggml would otherwise attach gdb to print a backtrace.
        setenv("GGML_NO_BACKTRACE", "1", 0);
    }
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "version") == 0) {
        printf("k3ref (llama.cpp v0.4.0 libraries in %s)\n", libdir());
        return 0;
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (strcmp(argv[1], cmds[i].name) == 0) {
            int rc = cmds[i].fn(argc - 2, argv + 2);
            if (fflush(stdout) != 0) {
                die(EXIT_FAIL, "writing stdout: %s", strerror(errno));
            }
            return rc;
        }
    }
    die(EXIT_USAGE, "unknown command \"%s\" (k3ref --help lists them)", argv[1]);
}
