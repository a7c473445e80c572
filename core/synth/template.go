package synth

import _ "embed"

// ChatTemplate is Kimi K3's published chat template, byte for byte as
// llama.cpp ships it (models/templates/Kimi-K3.jinja at the reference
// release; convert_hf_to_gguf.py writes it into tokenizer.chat_template
// because the HF checkpoint renders chats in Python). It is the model's
// data, not k3 code: update it only by copying a newer published version.
//
//go:embed kimi-k3.jinja
var ChatTemplate string
