package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/tokenizer"
)

func init() {
	register(&command{
		name:    "tokenize",
		summary: "print the token ids of a text with a model's tokenizer, as JSON",
		run:     runTokenize,
	})
	register(&command{
		name:    "detokenize",
		summary: "print the text of comma-separated token ids with a model's tokenizer",
		run:     runDetokenize,
	})
}

// openTokenizer loads the tokenizer of a GGUF model (any shard set; only
// the metadata is read).
func openTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tokenizer.FromGGUF(f)
}

func modelFlag(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "m", "", "model GGUF file (first shard of a split model)")
	fs.StringVar(p, "model", "", "same as -m")
}

func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", stderr)
	var model string
	modelFlag(fs, &model)
	text := fs.String("text", "", "text to tokenize")
	file := fs.String("file", "", "file whose bytes to tokenize ('-' for stdin)")
	noSpecial := fs.Bool("no-special", false, "neither add BOS/EOS nor turn special-token text such as <|im_end|> into special tokens")
	pieces := fs.Bool("pieces", false, "also print each token's text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: k3 tokenize -m MODEL.gguf (--text TEXT | --file FILE) [--no-special] [--pieces]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	textSet := false
	fs.Visit(func(fl *flag.Flag) { textSet = textSet || fl.Name == "text" })
	if model == "" || textSet == (*file != "") {
		fs.Usage()
		return errUsage
	}
	input := *text
	if *file != "" {
		var b []byte
		var err error
		if *file == "-" {
			b, err = io.ReadAll(os.Stdin)
		} else {
			b, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		input = string(b)
	}
	tk, err := openTokenizer(model)
	if err != nil {
		return err
	}
	ids, err := tk.Tokenize(input, !*noSpecial, !*noSpecial)
	if err != nil {
		return err
	}
	out := struct {
		Tokens []int32   `json:"tokens"`
		Pieces *[]string `json:"pieces,omitempty"`
	}{Tokens: ids}
	if out.Tokens == nil {
		out.Tokens = []int32{}
	}
	if *pieces {
		ps := make([]string, len(ids))
		for i, id := range ids {
			if ps[i], err = tk.Piece(id, true); err != nil {
				return err
			}
		}
		out.Pieces = &ps
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

func runDetokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("detokenize", stderr)
	var model string
	modelFlag(fs, &model)
	list := fs.String("tokens", "", "comma-separated token ids")
	noSpecial := fs.Bool("no-special", false, "render control tokens such as <|im_end|> as nothing")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: k3 detokenize -m MODEL.gguf --tokens 1,2,3 [--no-special]")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if model == "" {
		fs.Usage()
		return errUsage
	}
	var ids []int32
	for _, f := range strings.Split(*list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return fmt.Errorf("--tokens: %q is not a token id", f)
		}
		ids = append(ids, int32(id))
	}
	tk, err := openTokenizer(model)
	if err != nil {
		return err
	}
	s, err := tk.Detokenize(ids, false, !*noSpecial)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, s)
	return err
}
