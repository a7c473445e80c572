// placeholder until the model subcommands land
#include "k3ref.h"
#define STUB(n) int n(int argc, char ** argv) { (void) argc; (void) argv; die(EXIT_USAGE, "not implemented yet"); }
STUB(cmd_meta) STUB(cmd_load) STUB(cmd_logits) STUB(cmd_greedy) STUB(cmd_tokenize) STUB(cmd_detokenize) STUB(cmd_pieces)
