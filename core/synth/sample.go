package synth

// sampleText is the corpus the vocabulary's merges are learned from:
// English prose, code and CJK, so that common words, identifiers and
// multi-byte characters each get merged tokens. Changing it changes every
// synthetic file's vocabulary.
const sampleText = `The quick brown fox jumps over the lazy dog. The dog does not mind; it is a lazy dog.
A model that is larger than the memory of the machine has to be read from storage while it runs.
The router of each layer chooses which experts the token needs, and the stager reads them ahead.
When the cache is warm, most of the experts are already in memory and the step is fast.
When the cache is cold, the step waits on the disk, and the disk is the slowest part of the system.
Please write a short answer. Thank you for the question; here is what I think about it.
In the morning the weather was cold, but in the afternoon the sun came out and the day was warm.
She said that the train would leave at seven, so we walked to the station and waited there.
There are three things to remember: read the file, check the header, and validate every tensor.
Numbers matter: 1, 2, 3, 10, 42, 100, 256, 1024, 4096, 65536, 2026, 3.14159, 0.5, 1e-5.
The user asked the assistant to summarize the document, and the assistant wrote a summary.

package main

import (
	"fmt"
	"os"
)

// main prints the arguments it was given, one per line.
func main() {
	for i, arg := range os.Args[1:] {
		fmt.Printf("%d: %s\n", i, arg)
	}
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no arguments")
	}
	return nil
}

def tokenize(text: str) -> list[int]:
    """Return the token ids of text."""
    ids = []
    for word in text.split():
        if word in vocab:
            ids.append(vocab[word])
        else:
            ids.extend(encode_bytes(word.encode("utf-8")))
    return ids

class Model:
    def __init__(self, path, threads=4):
        self.path = path
        self.threads = threads

    def forward(self, tokens):
        return [self.layer(i, tokens) for i in range(len(tokens))]

{"role": "user", "content": "What is the capital of France?"}
{"role": "assistant", "content": "The capital of France is Paris."}

人工智能是计算机科学的一个分支，它研究如何让机器像人一样思考和学习。
今天天气很好，我们一起去公园散步吧。这个模型的参数很多，需要很大的内存。
我们的系统从存储中读取专家权重，然后在处理器上计算。
日本語の文章も少し入れておきます。今日はいい天気ですね。モデルを読み込んでいます。
한국어 문장도 조금 있습니다. 감사합니다.
Ünïcödé wörds, café, naïve, résumé, Straße, Ελληνικά, русский текст — and emoji 🙂👍.
`
