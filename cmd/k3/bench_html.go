package main

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"strings"
)

// writeReport writes prefix.md and prefix.html: the record for a person,
// meant to be pasted into an issue (the Markdown) or opened in a browser
// (the HTML, with no file or network reference, its chart inline SVG).
func writeReport(prefix string, r *benchRecord) error {
	rows := reportRows(r)
	chart := decodeChart(r)
	var md strings.Builder
	fmt.Fprintf(&md, "## k3 bench: %s on %s\n\n", r.Model.Name+" "+r.Model.FileType, r.CPU.Brand)
	md.WriteString("| | |\n|---|---|\n")
	for _, kv := range rows {
		fmt.Fprintf(&md, "| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", "\\|"))
	}
	md.WriteString("\n### Decode time per repetition: waiting on storage vs the rest\n\n```\n")
	md.WriteString(textChart(r))
	md.WriteString("```\n")
	if layers := layerRows(r); len(layers) > 0 {
		md.WriteString("\n### Routed experts per layer and decoded token: acquire (storage wait and IPC) vs compute\n\n```\n")
		md.WriteString(textLayerChart(layers))
		md.WriteString("```\n")
	}
	md.WriteString("\n<details><summary>JSON record</summary>\n\n```json\n")
	md.WriteString(recordJSON(r))
	md.WriteString("\n```\n</details>\n")
	if err := os.WriteFile(prefix+".md", []byte(md.String()), 0o644); err != nil {
		return err
	}

	var h strings.Builder
	h.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>k3 bench report</title>\n" +
		"<style>body{font:14px system-ui,sans-serif;max-width:60em;margin:2em auto;color:#222}" +
		"table{border-collapse:collapse}td{border:1px solid #ccc;padding:.25em .6em;vertical-align:top}" +
		"td:first-child{font-weight:600;white-space:nowrap}pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>\n")
	fmt.Fprintf(&h, "<h1>k3 bench: %s on %s</h1>\n<table>\n", html.EscapeString(r.Model.Name+" "+r.Model.FileType), html.EscapeString(r.CPU.Brand))
	for _, kv := range rows {
		fmt.Fprintf(&h, "<tr><td>%s</td><td>%s</td></tr>\n", html.EscapeString(kv[0]), html.EscapeString(kv[1]))
	}
	h.WriteString("</table>\n<h2>Decode time per repetition: waiting on storage vs the rest</h2>\n")
	h.WriteString(chart)
	if layers := layerRows(r); len(layers) > 0 {
		h.WriteString("<h2>Routed experts per layer and decoded token: acquire (storage wait and IPC) vs compute</h2>\n")
		h.WriteString(layerChart(layers))
	}
	fmt.Fprintf(&h, "<details><summary>JSON record</summary><pre>%s</pre></details>\n</body></html>\n", html.EscapeString(recordJSON(r)))
	return os.WriteFile(prefix+".html", []byte(h.String()), 0o644)
}

// reportRows are the report's table: what the issue asks a record to say.
func reportRows(r *benchRecord) [][2]string {
	gib := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	rate := func(s benchStat) string {
		return fmt.Sprintf("%.3f ± %.3f tok/s (%d runs)", s.Mean, s.SD, len(s.Runs))
	}
	l3 := "unknown"
	if r.CPU.L3 > 0 {
		l3 = fmt.Sprintf("%d MiB", r.CPU.L3>>20)
	}
	rows := [][2]string{
		{"k3", r.K3Version + " (" + r.K3Revision + "), " + r.GoVersion},
		{"CPU", fmt.Sprintf("%s, %d cores, %d threads, L3 %s; %s", r.CPU.Brand, r.CPU.PhysicalCores, r.CPU.LogicalCores, l3, strings.Join(r.CPU.Flags, " "))},
	}
	if h := r.Host; h != nil {
		ram := gib(h.MemTotal)
		if h.CgroupLimit > 0 {
			ram += ", memory cgroup limit " + gib(h.CgroupLimit)
		}
		io := "buffered (the page cache may have served it)"
		if h.ReadDirect {
			io = "O_DIRECT"
		}
		bw := "not measured (no model file of 4 MiB or more)"
		if h.ReadBandwidth > 0 {
			bw = fmt.Sprintf("%.2f GB/s (4 readers x 4 MiB random reads of the model, %s, ~1 s)", h.ReadBandwidth/1e9, io)
		}
		rows = append(rows, [2]string{"RAM", ram},
			[2]string{"storage", fmt.Sprintf("%s, %s", h.Device, h.Storage)},
			[2]string{"read bandwidth", bw})
	}
	rows = append(rows,
		[2]string{"model", fmt.Sprintf("%s (%s, %s, %s in %d file(s))", r.Model.Path, r.Model.Arch, r.Model.FileType, gib(r.Model.Bytes), r.Model.Files)},
		[2]string{"mode", r.Mode.Line},
		[2]string{"run", fmt.Sprintf("prompt %d, decode %d, ubatch %d, threads %d, %d repetitions", r.Prompt, r.Gen, r.UBatch, r.Threads, r.Reps)},
		[2]string{"prefill", rate(r.Prefill)},
		[2]string{"decode", rate(r.Decode)},
		[2]string{"peak RSS", fmt.Sprintf("%s (VmHWM), plugin processes %s", gib(r.Memory.VmHWM), gib(r.Memory.MaxRSSChildren))},
	)
	if s := r.Storage; s != nil {
		rows = append(rows,
			[2]string{"bytes read per token", fmt.Sprintf("decode %s, prefill %s", mib(s.DecodeBytesPerToken), mib(s.PrefillBytesPerToken))},
			[2]string{"expert cache hit rate", fmt.Sprintf("%.1f%% (decode %.1f%%)", 100*s.HitRate, 100*s.DecodeHitRate)},
			[2]string{"decode wait share", fmt.Sprintf("%.1f%% waiting on storage, %.1f%% in acquire (waits plus IPC)", 100*s.DecodeWaitShare, 100*s.DecodeAcquireShare)},
		)
		bound := "none: decode read nothing (the cache held every expert it used)"
		if s.DecodeBytesPerToken > 0 {
			var parts []string
			if s.StorageBoundDecode > 0 {
				parts = append(parts, fmt.Sprintf("%.3f tok/s by the run's own reads (%.2f GB/s at the stager's queue depth / decode bytes per token)", s.StorageBoundDecode, s.RunReadBandwidth/1e9))
			}
			if h := r.Host; h != nil && h.ReadBandwidth > 0 {
				parts = append(parts, fmt.Sprintf("%.3f tok/s by the read test before the run", h.ReadBandwidth/s.DecodeBytesPerToken))
			}
			if len(parts) > 0 {
				bound = strings.Join(parts, "; ")
			}
		}
		rows = append(rows, [2]string{"storage-bound decode rate", bound})
	} else {
		rows = append(rows, [2]string{"storage", "none: weights mapped from the file"})
	}
	return rows
}

// splits are the chart's bars: per repetition, storage wait, the rest of
// acquire, and compute (everything else), in seconds. Without a stager
// the decode is all compute.
func splits(r *benchRecord) [][3]float64 {
	var out [][3]float64
	if r.Storage != nil && len(r.Storage.DecodeSplit) > 0 {
		for _, s := range r.Storage.DecodeSplit {
			out = append(out, [3]float64{s.Wait, max(s.Acquire-s.Wait, 0), max(s.Decode-s.Acquire, 0)})
		}
		return out
	}
	for _, tps := range r.Decode.Runs {
		if tps > 0 {
			out = append(out, [3]float64{0, 0, float64(r.Gen) / tps})
		}
	}
	return out
}

var chartParts = [3]struct{ name, color, glyph string }{
	{"waiting on storage", "#d9534f", "#"},
	{"acquire: IPC and pinning", "#f0ad4e", "+"},
	{"compute", "#5b9bd5", "="},
}

// decodeChart is splits as an inline SVG of stacked horizontal bars.
func decodeChart(r *benchRecord) string {
	bars := splits(r)
	var longest float64
	for _, b := range bars {
		longest = max(longest, b[0]+b[1]+b[2])
	}
	const left, width, barH, gap = 90, 480, 22, 8
	height := len(bars)*(barH+gap) + 50
	var s strings.Builder
	fmt.Fprintf(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-size=\"12\" role=\"img\" aria-label=\"decode time split\">\n", left+width+120, height)
	for i, b := range bars {
		y := i * (barH + gap)
		fmt.Fprintf(&s, "<text x=\"0\" y=\"%d\">repetition %d</text>\n", y+15, i+1)
		x := float64(left)
		for p, v := range b {
			w := 0.0
			if longest > 0 {
				w = v / longest * width
			}
			fmt.Fprintf(&s, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s: %.3f s</title></rect>\n", x, y, w, barH, chartParts[p].color, chartParts[p].name, v)
			x += w
		}
		fmt.Fprintf(&s, "<text x=\"%.1f\" y=\"%d\">%.2f s</text>\n", x+6, y+15, b[0]+b[1]+b[2])
	}
	y := len(bars)*(barH+gap) + 20
	for p, part := range chartParts {
		x := left + p*170
		fmt.Fprintf(&s, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", x, y, part.color, x+16, y+11, part.name)
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// textChart is the same chart in characters, for the Markdown.
func textChart(r *benchRecord) string {
	bars := splits(r)
	var longest float64
	for _, b := range bars {
		longest = max(longest, b[0]+b[1]+b[2])
	}
	var s strings.Builder
	for i, b := range bars {
		fmt.Fprintf(&s, "rep %2d |", i+1)
		for p, v := range b {
			n := 0
			if longest > 0 {
				n = int(v/longest*60 + 0.5)
			}
			s.WriteString(strings.Repeat(chartParts[p].glyph, n))
		}
		fmt.Fprintf(&s, " %.2f s (storage wait %.2f s)\n", b[0]+b[1]+b[2], b[0])
	}
	for _, p := range chartParts {
		fmt.Fprintf(&s, "%s %s  ", p.glyph, p.name)
	}
	s.WriteString("\n")
	return s.String()
}

// recordJSON is the record as --json prints it, indented.
func recordJSON(r *benchRecord) string {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// layerRows are the per-layer chart's bars: acquire and compute in ms per
// decoded token, by layer.
func layerRows(r *benchRecord) []benchLayer {
	if r.Storage == nil {
		return nil
	}
	return r.Storage.DecodeLayers
}

var layerParts = [2]struct{ name, color, glyph string }{
	{"acquire: storage wait and IPC", "#d9534f", "#"},
	{"compute: the experts' products", "#5b9bd5", "="},
}

// layerChart is the layers as an inline SVG of stacked horizontal bars.
func layerChart(layers []benchLayer) string {
	var longest float64
	for _, l := range layers {
		longest = max(longest, l.AcquireMS+l.ComputeMS)
	}
	const left, width, barH, gap = 70, 480, 12, 3
	height := len(layers)*(barH+gap) + 40
	var s strings.Builder
	fmt.Fprintf(&s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-size=\"11\" role=\"img\" aria-label=\"per-layer acquire and compute time\">\n", left+width+110, height)
	for i, l := range layers {
		y := i * (barH + gap)
		fmt.Fprintf(&s, "<text x=\"0\" y=\"%d\">layer %d</text>\n", y+10, l.Layer)
		x := float64(left)
		for p, v := range [2]float64{l.AcquireMS, l.ComputeMS} {
			w := 0.0
			if longest > 0 {
				w = v / longest * width
			}
			fmt.Fprintf(&s, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s: %.2f ms/token</title></rect>\n", x, y, w, barH, layerParts[p].color, layerParts[p].name, v)
			x += w
		}
		fmt.Fprintf(&s, "<text x=\"%.1f\" y=\"%d\">%.1f ms</text>\n", x+6, y+10, l.AcquireMS+l.ComputeMS)
	}
	y := len(layers)*(barH+gap) + 16
	for p, part := range layerParts {
		x := left + p*220
		fmt.Fprintf(&s, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n", x, y, part.color, x+16, y+11, part.name)
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// textLayerChart is the same chart in characters, for the Markdown.
func textLayerChart(layers []benchLayer) string {
	var longest float64
	for _, l := range layers {
		longest = max(longest, l.AcquireMS+l.ComputeMS)
	}
	var s strings.Builder
	for _, l := range layers {
		fmt.Fprintf(&s, "layer %3d |", l.Layer)
		for p, v := range [2]float64{l.AcquireMS, l.ComputeMS} {
			n := 0
			if longest > 0 {
				n = int(v/longest*50 + 0.5)
			}
			s.WriteString(strings.Repeat(layerParts[p].glyph, n))
		}
		fmt.Fprintf(&s, " %.1f ms (acquire %.1f)\n", l.AcquireMS+l.ComputeMS, l.AcquireMS)
	}
	for _, p := range layerParts {
		fmt.Fprintf(&s, "%s %s  ", p.glyph, p.name)
	}
	s.WriteString("\n")
	return s.String()
}
