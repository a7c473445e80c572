// Model subcommands through libllama: load, logits, greedy, tokenize, detokenize, pieces.
#include "k3ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"


struct opts {
    const char * model;
    int          threads;
    int          batch; // n_ubatch; 0 = llama.cpp default
    int          ctx;   // n_ctx; 0 = just what the tokens need
    bool         all;   // logits of every position
    bool         ignore_eog;
    bool         no_repack; // keep weights in their file layout (no CPU_REPACK buffers)
    int          flash_attn;
    const char * cpu;
    bool         add_special, parse_special, remove_special, unparse_special, special, many;
};

// parse_opts reads MODEL, then the fixed positional arguments into pos, then flags.
static struct opts parse_opts(int argc, char ** argv, const char * usage, int npos, char ** pos) {
    struct opts o = {.threads = 1, .flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO, .cpu = "native"};
    if (argc < 1 + npos) {
        die(EXIT_USAGE, "usage: %s", usage);
    }
    o.model = argv[0];
    for (int i = 0; i < npos; i++) {
        pos[i] = argv[1 + i];
    }
    for (int i = 1 + npos; i < argc; i++) {
        const char * a = argv[i];
        const char * val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDVAL() \
    if (!val) die(EXIT_USAGE, "%s needs a value", a); \
    i++
        if (strcmp(a, "--threads") == 0) {
            NEEDVAL();
            o.threads = (int) arg_int(a, val);
        } else if (strcmp(a, "--batch") == 0) {
            NEEDVAL();
            o.batch = (int) arg_int(a, val);
        } else if (strcmp(a, "--ctx") == 0) {
            NEEDVAL();
            o.ctx = (int) arg_int(a, val);
        } else if (strcmp(a, "--cpu") == 0) {
            NEEDVAL();
            o.cpu = val;
        } else if (strcmp(a, "--flash-attn") == 0) {
            NEEDVAL();
            if (strcmp(val, "auto") == 0) {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
            } else if (strcmp(val, "on") == 0) {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            } else if (strcmp(val, "off") == 0) {
                o.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            } else {
                die(EXIT_USAGE, "--flash-attn takes auto, on or off, not \"%s\"", val);
            }
        } else if (strcmp(a, "--all") == 0) {
            o.all = true;
        } else if (strcmp(a, "--no-repack") == 0) {
            o.no_repack = true;
        } else if (strcmp(a, "--ignore-eog") == 0) {
            o.ignore_eog = true;
        } else if (strcmp(a, "--add-special") == 0) {
            o.add_special = true;
        } else if (strcmp(a, "--parse-special") == 0) {
            o.parse_special = true;
        } else if (strcmp(a, "--remove-special") == 0) {
            o.remove_special = true;
        } else if (strcmp(a, "--unparse-special") == 0) {
            o.unparse_special = true;
        } else if (strcmp(a, "--many") == 0) {
            o.many = true;
        } else if (strcmp(a, "--special") == 0) {
            o.special = true;
        } else {
            die(EXIT_USAGE, "unknown option \"%s\" (usage: %s)", a, usage);
        }
#undef NEEDVAL
    }
    if (o.threads < 1 || o.batch < 0 || o.ctx < 0) {
        die(EXIT_USAGE, "--threads must be positive, --batch and --ctx not negative");
    }
    return o;
}

static struct llama_model * load_model(const struct opts * o, bool vocab_only) {
    if (strcmp(o->cpu, "native") == 0) {
        ggml_backend_load_all_from_path(libdir());
    } else {
        char path[4096];
        variant_path(o->cpu, path, sizeof(path));
        if (!ggml_backend_load(path)) {
            die(EXIT_USAGE, "cannot load CPU variant \"%s\" (%s)", o->cpu, path);
        }
    }
    if (ggml_backend_dev_count() == 0) {
        die(EXIT_FAIL, "no ggml backend loaded from %s", libdir());
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    if (o->no_repack) {
        mp.use_extra_bufts = false;
    }
    struct llama_model * m = llama_model_load_from_file(o->model, mp);
    if (!m) {
        die(EXIT_REJECTED, "llama_model_load_from_file failed for %s", o->model);
    }
    return m;
}

// read_tokens reads little-endian int32 tokens from stdin and checks them against the vocabulary.
static llama_token * read_tokens(const struct llama_vocab * v, int32_t * n) {
    size_t len;
    llama_token * t = read_all(&len);
    if (len % 4 != 0 || len / 4 > INT32_MAX) {
        die(EXIT_USAGE, "stdin has %zu bytes, not a whole number of int32 tokens", len);
    }
    *n = (int32_t) (len / 4);
    int32_t nv = llama_vocab_n_tokens(v);
    for (int32_t i = 0; i < *n; i++) {
        if (t[i] < 0 || t[i] >= nv) {
            die(EXIT_USAGE, "token %d at position %d is outside the vocabulary (%d tokens)", t[i], i, nv);
        }
    }
    return t;
}

static void json_tokens(const llama_token * t, int32_t n) {
    printf("{\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        printf("%s%d", i ? "," : "", t[i]);
    }
    printf("]}\n");
}

int cmd_load(int argc, char ** argv) {
    struct opts o = parse_opts(argc, argv, "load MODEL [--cpu VARIANT]", 0, NULL);
    struct llama_model * m = load_model(&o, false);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    char arch[256] = "", desc[512] = "";
    llama_model_meta_val_str(m, "general.architecture", arch, sizeof(arch));
    llama_model_desc(m, desc, sizeof(desc));
    printf("{\"arch\":");
    json_str(arch, strlen(arch));
    printf(",\"desc\":");
    json_str(desc, strlen(desc));
    printf(",\"n_vocab\":%d,\"n_layer\":%d,\"n_embd\":%d,\"n_head\":%d,\"n_head_kv\":%d,\"n_ctx_train\":%d,"
           "\"n_params\":%llu,\"size\":%llu,\"vocab_type\":%d,\"bos\":%d,\"eos\":%d}\n",
           llama_vocab_n_tokens(v), llama_model_n_layer(m), llama_model_n_embd(m), llama_model_n_head(m),
           llama_model_n_head_kv(m), llama_model_n_ctx_train(m), (unsigned long long) llama_model_n_params(m),
           (unsigned long long) llama_model_size(m), (int) llama_vocab_type(v), llama_vocab_bos(v), llama_vocab_eos(v));
    llama_model_free(m);
    return 0;
}

static struct llama_context * new_context(struct llama_model * m, const struct opts * o, int32_t n_tokens, int extra) {
    struct llama_context_params cp = llama_context_default_params();
    int32_t need = n_tokens + extra;
    cp.n_ctx = (uint32_t) (o->ctx > need ? o->ctx : need);
    cp.n_batch = (uint32_t) (n_tokens > 0 ? n_tokens : 1);
    if (o->batch > 0) {
        cp.n_ubatch = (uint32_t) o->batch;
    }
    if (cp.n_ubatch > cp.n_batch) {
        cp.n_ubatch = cp.n_batch;
    }
    cp.n_seq_max = 1;
    cp.n_threads = o->threads;
    cp.n_threads_batch = o->threads;
    cp.flash_attn_type = (enum llama_flash_attn_type) o->flash_attn;
    cp.no_perf = true;
    struct llama_context * c = llama_init_from_model(m, cp);
    if (!c) {
        die(EXIT_FAIL, "llama_init_from_model failed (n_ctx %u, n_batch %u, n_ubatch %u)", cp.n_ctx, cp.n_batch,
            cp.n_ubatch);
    }
    return c;
}

// decode_prompt evaluates the tokens as one batch, asking for the logits of the
// last position or of every position.
static void decode_prompt(struct llama_context * c, const llama_token * t, int32_t n, bool all) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t i = 0; i < n; i++) {
        b.token[i] = t[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all || i == n - 1;
    }
    b.n_tokens = n;
    int32_t rc = llama_decode(c, b);
    if (rc != 0) {
        die(EXIT_FAIL, "llama_decode of %d tokens returned %d", n, rc);
    }
    llama_batch_free(b);
}

int cmd_logits(int argc, char ** argv) {
    struct opts o = parse_opts(argc, argv, "logits MODEL [--threads N] [--batch N] [--ctx N] [--all] ...", 0, NULL);
    struct llama_model * m = load_model(&o, false);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    int32_t n;
    llama_token * t = read_tokens(v, &n);
    if (n == 0) {
        die(EXIT_USAGE, "no tokens on stdin");
    }
    struct llama_context * c = new_context(m, &o, n, 0);
    decode_prompt(c, t, n, o.all);
    uint32_t nv = (uint32_t) llama_vocab_n_tokens(v);
    uint32_t rows = o.all ? (uint32_t) n : 1;
    write_all(&rows, 4);
    write_all(&nv, 4);
    for (int32_t i = o.all ? 0 : n - 1; i < n; i++) {
        const float * l = llama_get_logits_ith(c, i);
        if (!l) {
            die(EXIT_FAIL, "llama_get_logits_ith(%d) returned NULL", i);
        }
        write_all(l, nv * sizeof(float));
    }
    llama_free(c);
    llama_model_free(m);
    return 0;
}

int cmd_greedy(int argc, char ** argv) {
    char * pos[1];
    struct opts o = parse_opts(argc, argv, "greedy MODEL N [--threads N] [--ignore-eog] ...", 1, pos);
    int64_t ngen = arg_int("N", pos[0]);
    if (ngen < 0 || ngen > 1 << 20) {
        die(EXIT_USAGE, "N out of range: %lld", (long long) ngen);
    }
    struct llama_model * m = load_model(&o, false);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    int32_t n;
    llama_token * t = read_tokens(v, &n);
    if (n == 0) {
        die(EXIT_USAGE, "no tokens on stdin");
    }
    struct llama_context * c = new_context(m, &o, n, (int) ngen);
    decode_prompt(c, t, n, false);
    struct llama_sampler * s = llama_sampler_init_greedy();
    llama_token * out = malloc((ngen + 1) * sizeof(llama_token));
    int32_t got = 0;
    while (got < ngen) {
        llama_token tok = llama_sampler_sample(s, c, -1);
        out[got++] = tok;
        if ((!o.ignore_eog && llama_vocab_is_eog(v, tok)) || got == ngen) {
            break;
        }
        int32_t rc = llama_decode(c, llama_batch_get_one(&tok, 1));
        if (rc != 0) {
            die(EXIT_FAIL, "llama_decode of generated token %d returned %d", got, rc);
        }
    }
    json_tokens(out, got);
    llama_sampler_free(s);
    llama_free(c);
    llama_model_free(m);
    return 0;
}

// tokenize_one returns the tokens of text[0:len] in *t (grown as needed).
static int32_t tokenize_one(const struct llama_vocab * v, const struct opts * o, const char * text, size_t len,
                            llama_token ** t, int32_t * cap) {
    if (len > INT32_MAX / 2) {
        die(EXIT_USAGE, "text too long (%zu bytes)", len);
    }
    if (*cap < (int32_t) len + 16) {
        *cap = (int32_t) len + 16;
        *t = realloc(*t, *cap * sizeof(llama_token));
    }
    int32_t n = llama_tokenize(v, text, (int32_t) len, *t, *cap, o->add_special, o->parse_special);
    if (n < 0) {
        *cap = -n;
        *t = realloc(*t, *cap * sizeof(llama_token));
        n = llama_tokenize(v, text, (int32_t) len, *t, *cap, o->add_special, o->parse_special);
    }
    if (n < 0) {
        die(EXIT_FAIL, "llama_tokenize returned %d", n);
    }
    return n;
}

// tokenize reads one text from stdin, or with --many a sequence of texts, each
// a little-endian u32 length and its bytes, so that one vocabulary load serves many.
int cmd_tokenize(int argc, char ** argv) {
    struct opts o = parse_opts(argc, argv, "tokenize MODEL [--add-special] [--parse-special] [--many]", 0, NULL);
    struct llama_model * m = load_model(&o, true);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    size_t len;
    char * in = read_all(&len);
    llama_token * t = NULL;
    int32_t cap = 0;
    if (!o.many) {
        json_tokens(t, tokenize_one(v, &o, in, len, &t, &cap));
        llama_model_free(m);
        return 0;
    }
    printf("{\"texts\":[");
    for (size_t off = 0, i = 0; off < len; i++) {
        uint32_t n;
        if (len - off < 4 || (memcpy(&n, in + off, 4), len - off - 4 < n)) {
            die(EXIT_USAGE, "--many: text %zu at byte %zu is truncated", i, off);
        }
        int32_t got = tokenize_one(v, &o, in + off + 4, n, &t, &cap);
        printf("%s[", i ? ",\n" : "");
        for (int32_t k = 0; k < got; k++) {
            printf("%s%d", k ? "," : "", t[k]);
        }
        putchar(']');
        off += 4 + (size_t) n;
    }
    printf("]}\n");
    llama_model_free(m);
    return 0;
}

int cmd_detokenize(int argc, char ** argv) {
    struct opts o = parse_opts(argc, argv, "detokenize MODEL [--remove-special] [--unparse-special]", 0, NULL);
    struct llama_model * m = load_model(&o, true);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    int32_t n;
    llama_token * t = read_tokens(v, &n);
    int32_t cap = n * 16 + 64;
    char * buf = malloc(cap);
    int32_t got = llama_detokenize(v, t, n, buf, cap, o.remove_special, o.unparse_special);
    if (got < 0) {
        cap = -got;
        buf = realloc(buf, cap);
        got = llama_detokenize(v, t, n, buf, cap, o.remove_special, o.unparse_special);
    }
    if (got < 0) {
        die(EXIT_FAIL, "llama_detokenize returned %d", got);
    }
    write_all(buf, got);
    llama_model_free(m);
    return 0;
}

int cmd_pieces(int argc, char ** argv) {
    struct opts o = parse_opts(argc, argv, "pieces MODEL [--special]", 0, NULL);
    struct llama_model * m = load_model(&o, true);
    const struct llama_vocab * v = llama_model_get_vocab(m);
    int32_t n;
    llama_token * t = read_tokens(v, &n);
    int32_t cap = 256;
    char * buf = malloc(cap);
    for (int32_t i = 0; i < n; i++) {
        int32_t got = llama_token_to_piece(v, t[i], buf, cap, 0, o.special);
        if (got < 0) {
            cap = -got;
            buf = realloc(buf, cap);
            got = llama_token_to_piece(v, t[i], buf, cap, 0, o.special);
        }
        if (got < 0) {
            die(EXIT_FAIL, "llama_token_to_piece(%d) returned %d", t[i], got);
        }
        uint32_t l = (uint32_t) got;
        write_all(&l, 4);
        write_all(buf, l);
    }
    llama_model_free(m);
    return 0;
}
