package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func runRunArgs(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	old := runStdin
	runStdin = strings.NewReader(stdin)
	defer func() { runStdin = old }()
	var out, errb bytes.Buffer
	code := runMain(append([]string{"run"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

var speedRE = regexp.MustCompile(`k3: prefill (\d+) tokens \((\d+) reused\) in [0-9.]+s, [0-9.]+ tok/s \| decode (\d+) tokens in [0-9.]+s, [0-9.]+ tok/s \| finish=(\w+)`)

// speeds returns the speed lines of stderr: [evaluated, reused, generated] and the finish reason.
func speeds(t *testing.T, stderr string) ([][3]int, []string) {
	t.Helper()
	var n [][3]int
	var fin []string
	for _, m := range speedRE.FindAllStringSubmatch(stderr, -1) {
		var v [3]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		n = append(n, v)
		fin = append(fin, m[4])
	}
	return n, fin
}

func TestRunCommand(t *testing.T) {
	path, _ := tinyModel(t)
	greedy := []string{"-m", path, "-t", "1", "--temp", "0", "-n", "24", "--profile", "auto"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"raw", []string{"--raw", "-p", "The quick brown fox"}},
		{"chat template", []string{"-p", "Hello"}},
		{"no think", []string{"-p", "Hello", "--no-think"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runRunArgs(t, "", append(greedy, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if strings.TrimSpace(out) == "" {
				t.Error("no text on stdout")
			}
			if !strings.Contains(errs, "k3: profile=") || !strings.Contains(errs, "threads=1") {
				t.Errorf("no mode line in %q", errs)
			}
			n, fin := speeds(t, errs)
			if len(n) != 1 || n[0][0] == 0 || n[0][1] != 0 || fin[0] == "error" {
				t.Errorf("speed lines %v %v in %q", n, fin, errs)
			}
			if thinks := strings.HasPrefix(out, "[reasoning]\n"); thinks != (tc.name == "chat template") {
				t.Errorf("reasoning shown %v in %q", thinks, out)
			}
			// greedy is deterministic, and a stop string cuts the text where it begins
			code2, out2, _ := runRunArgs(t, "", append(greedy, tc.args...)...)
			if code2 != 0 || out2 != out {
				t.Errorf("second greedy run differs: %q vs %q", out2, out)
			}
			text := strings.TrimSuffix(out, "\n")
			if tc.name != "raw" {
				return
			}
			stop := text[len(text)/2 : len(text)/2+2]
			_, out3, errs3 := runRunArgs(t, "", append(greedy, append(tc.args, "--stop", stop)...)...)
			if want := text[:strings.Index(text, stop)] + "\n"; out3 != want {
				t.Errorf("with --stop %q: %q, want %q", stop, out3, want)
			}
			if _, fin := speeds(t, errs3); len(fin) != 1 || fin[0] != "stop" {
				t.Errorf("finish %v", fin)
			}
		})
	}
}

// TestRunChat: --chat keeps the conversation and the second turn reuses
// the evaluated first one.
func TestRunChat(t *testing.T) {
	path, _ := tinyModel(t)
	code, out, errs := runRunArgs(t, "Hello there\n\nHow are you?\n/exit\nnever read\n",
		"-m", path, "-t", "1", "--temp", "0.7", "--seed", "3", "-n", "12", "--chat")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	n, _ := speeds(t, errs)
	if len(n) != 2 {
		t.Fatalf("want two turns, got %v in %q", n, errs)
	}
	first := n[0][0] + n[0][1]
	if n[0][1] != 0 || n[1][1] < first {
		t.Errorf("turn 2 reused %d tokens, want at least turn 1's prompt of %d", n[1][1], first)
	}
	if strings.Count(out, "> ") != 4 { // three lines read and the /exit
		t.Errorf("prompts in %q", out)
	}
	// EOF ends the chat too, and /clear starts over
	code, _, errs = runRunArgs(t, "Hi\n/clear\nHi", "-m", path, "-t", "1", "--temp", "0", "-n", "4", "--chat")
	if n, _ := speeds(t, errs); code != 0 || len(n) != 2 || n[1][1] == 0 {
		t.Errorf("exit %d, turns %v: %s", code, n, errs)
	}
}

func TestRunErrors(t *testing.T) {
	path, _ := tinyModel(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no model", []string{"-p", "x"}, 2, "-m is required"},
		{"no prompt", []string{"-m", path}, 2, "-p is required"},
		{"prompt and chat", []string{"-m", path, "-p", "x", "--chat"}, 2, "exclude"},
		{"prompt too long", []string{"-m", path, "-c", "32", "--raw", "-p", strings.Repeat("many words ", 40)}, 1, "context holds 32"},
		{"missing file", []string{"-m", path + ".nope", "-p", "x"}, 1, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runRunArgs(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.msg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.msg)
			}
		})
	}
}
