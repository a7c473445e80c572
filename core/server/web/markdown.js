// k3 chat page: a markdown subset rendered straight to DOM nodes, with
// syntax highlighting for fenced code. Text from the model only ever becomes
// Text nodes (and checked href values), never HTML, so nothing it writes can
// run: there is no innerHTML here, and no library to keep patched.
// Supported: ATX headings, paragraphs (a single newline is a line break, as
// in chat), **strong**, *em*, ~~del~~, `code`, fenced code, lists (nested,
// ordered or not, [ ] task boxes), > quotes, tables, --- rules, [links](url)
// and bare URLs (http, https and mailto only). An image is shown as a link
// to it: the page fetches nothing the model names.
"use strict";

const Markdown = (() => {
  function el(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined) n.textContent = text;
    return n;
  }

  const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
  const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
  const QUOTE = /^ {0,3}> ?/;
  const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
  const TABLE_SEP = /^[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;

  const lead = (l) => l.length - l.trimStart().length;
  const isOrdered = (marker) => /\d/.test(marker);

  // startsBlock: would this line end a paragraph? (An ordered item only
  // interrupts one when it starts at 1, so "2020. was a year" stays text.)
  function startsBlock(l) {
    if (FENCE.test(l) || HEADING.test(l) || HR.test(l) || QUOTE.test(l)) return true;
    const m = ITEM.exec(l);
    return !!(m && m[3] && (!isOrdered(m[2]) || parseInt(m[2], 10) === 1));
  }

  function render(src) {
    const frag = document.createDocumentFragment();
    const lines = String(src).replace(/\r\n?/g, "\n").split("\n")
      .map((l) => l.replace(/^\t+/, (t) => "    ".repeat(t.length)));
    blocks(lines, frag);
    return frag;
  }

  function blocks(lines, out) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if ((m = FENCE.exec(line))) {
        const close = new RegExp("^ {0,3}" + (m[1][0] === "`" ? "`" : "~") + "{" + m[1].length + ",}[ \\t]*$");
        const body = [];
        for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
        i++; // the closing fence, or past the end while a reply still streams
        out.appendChild(codeBlock(body.join("\n"), m[2]));
      } else if ((m = HEADING.exec(line))) {
        const h = el("h" + m[1].length);
        inline(m[2] || "", h);
        out.appendChild(h);
        i++;
      } else if (HR.test(line)) {
        out.appendChild(el("hr"));
        i++;
      } else if (QUOTE.test(line)) {
        const body = [];
        for (; i < lines.length && lines[i].trim() && (QUOTE.test(lines[i]) || !startsBlock(lines[i])); i++) {
          body.push(lines[i].replace(QUOTE, ""));
        }
        const q = el("blockquote");
        blocks(body, q);
        out.appendChild(q);
      } else if (ITEM.test(line)) {
        i = list(lines, i, out);
      } else if (line.includes("|") && i + 1 < lines.length && lines[i + 1].includes("|") && TABLE_SEP.test(lines[i + 1])) {
        i = table(lines, i, out);
      } else {
        const para = [];
        for (; i < lines.length && lines[i].trim() && !(para.length && startsBlock(lines[i])); i++) para.push(lines[i].trim());
        const p = el("p");
        inline(para.join("\n"), p);
        out.appendChild(p);
      }
    }
  }

  // list renders the list that starts at lines[i] and returns the index of
  // the first line after it.
  function list(lines, i, out) {
    const first = ITEM.exec(lines[i]);
    const base = first[1].length, ordered = isOrdered(first[2]);
    const node = el(ordered ? "ol" : "ul");
    if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
    const items = [];
    let loose = false;
    while (i < lines.length) {
      const m = ITEM.exec(lines[i]);
      if (!m || HR.test(lines[i]) || isOrdered(m[2]) !== ordered || m[1].length > base + 1) break;
      const indent = m[1].length + m[2].length + 1;
      const body = [m[3] || ""];
      for (i++; i < lines.length;) {
        const l = lines[i];
        if (!l.trim()) {
          let j = i;
          while (j < lines.length && !lines[j].trim()) j++;
          if (j < lines.length && lead(lines[j]) >= indent) {
            for (; i < j; i++) body.push("");
            loose = true;
            continue;
          }
          const n = j < lines.length && ITEM.exec(lines[j]);
          if (n && n[1].length <= base + 1 && isOrdered(n[2]) === ordered && !HR.test(lines[j])) {
            loose = true;
            i = j;
          }
          break;
        }
        if (lead(l) >= indent || (ITEM.test(l) && lead(l) >= base + 2)) {
          body.push(l.slice(Math.min(lead(l), indent)));
        } else if (ITEM.test(l) || startsBlock(l)) {
          break;
        } else {
          body.push(l.trim()); // a lazy continuation of the item's text
        }
        i++;
      }
      items.push(body);
    }
    for (const body of items) {
      const li = el("li");
      const task = /^\[([ xX])\][ \t]+/.exec(body[0]);
      if (task) {
        body[0] = body[0].slice(task[0].length);
        li.className = "task";
        li.appendChild(el("span", "box", task[1] === " " ? "☐ " : "☑ "));
      }
      blocks(body, li);
      const p = li.querySelector(":scope > p");
      if (!loose && p) {
        p.replaceWith(...p.childNodes);
      }
      node.appendChild(li);
    }
    out.appendChild(node);
    return i;
  }

  function cells(row) {
    let r = row.trim();
    if (r.startsWith("|")) r = r.slice(1);
    if (r.endsWith("|") && !r.endsWith("\\|")) r = r.slice(0, -1);
    return r.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
  }

  function table(lines, i, out) {
    const head = cells(lines[i]);
    const aligns = cells(lines[i + 1]).map((c) =>
      c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "");
    const wrap = el("div", "tablewrap");
    const t = el("table");
    const row = (values, tag) => {
      const tr = el("tr");
      head.forEach((_, k) => {
        const c = el(tag);
        if (aligns[k]) c.style.textAlign = aligns[k];
        inline(values[k] || "", c);
        tr.appendChild(c);
      });
      return tr;
    };
    t.appendChild(el("thead")).appendChild(row(head, "th"));
    const tb = t.appendChild(el("tbody"));
    for (i += 2; i < lines.length && lines[i].trim() && lines[i].includes("|"); i++) tb.appendChild(row(cells(lines[i]), "td"));
    wrap.appendChild(t);
    out.appendChild(wrap);
    return i;
  }

  // ---- inline ----
  const PUNCT = /[!-/:-@[-`{-~]/;
  const WORDCH = /[\p{L}\p{N}]/u;

  function safeURL(u) {
    return /^(https?:\/\/|mailto:)/i.test(u) ? u : null;
  }

  function emphasis(text, i) {
    for (const [d, tag] of [["***", "strong em"], ["**", "strong"], ["__", "strong"], ["~~", "del"], ["*", "em"], ["_", "em"]]) {
      if (!text.startsWith(d, i)) continue;
      const after = text[i + d.length];
      if (!after || /\s/.test(after) || after === d[0]) continue;
      if (d[0] === "_" && i > 0 && WORDCH.test(text[i - 1])) continue; // snake_case
      for (let j = i + d.length + 1; (j = text.indexOf(d, j)) >= 0; j++) {
        if (/\s/.test(text[j - 1])) continue;
        if (d.length === 1 && (text[j + 1] === d || text[j - 1] === d)) continue;
        if (d[0] === "_" && WORDCH.test(text[j + d.length] || "")) continue;
        return { tag, inner: text.slice(i + d.length, j), end: j + d.length };
      }
    }
    return null;
  }

  function link(text, i) {
    const img = text[i] === "!";
    const k = i + (img ? 1 : 0);
    let depth = 0, j = k;
    for (; j < text.length; j++) {
      if (text[j] === "\\") { j++; continue; }
      if (text[j] === "[") depth++;
      else if (text[j] === "]" && --depth === 0) break;
    }
    if (j >= text.length || text[j + 1] !== "(") return null;
    let p = j + 2;
    for (let pd = 1; p < text.length; p++) {
      if (text[p] === "\n") return null;
      if (text[p] === "(") pd++;
      else if (text[p] === ")" && --pd === 0) break;
    }
    if (p >= text.length) return null;
    const target = text.slice(j + 2, p).trim().replace(/^<([^>]*)>/, "$1").split(/\s+/)[0];
    return { img, label: text.slice(k + 1, j), url: target, end: p + 1 };
  }

  function anchor(url, out, label) {
    const a = el("a");
    a.href = url;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    if (label === undefined) a.textContent = url; else inline(label, a);
    out.appendChild(a);
    return a;
  }

  function inline(text, out) {
    let buf = "";
    const flush = () => { if (buf) out.appendChild(document.createTextNode(buf)); buf = ""; };
    for (let i = 0; i < text.length;) {
      const c = text[i];
      let m;
      if (c === "\\" && i + 1 < text.length && PUNCT.test(text[i + 1])) {
        buf += text[i + 1];
        i += 2;
      } else if (c === "\n") {
        flush();
        out.appendChild(el("br"));
        i++;
      } else if (c === "`") {
        const run = /^`+/.exec(text.slice(i))[0];
        const end = text.indexOf(run, i + run.length);
        if (end < 0) { buf += run; i += run.length; continue; }
        let code = text.slice(i + run.length, end).replace(/\n/g, " ");
        if (code.length > 2 && code.startsWith(" ") && code.endsWith(" ")) code = code.slice(1, -1);
        flush();
        out.appendChild(el("code", null, code));
        i = end + run.length;
      } else if ((c === "*" || c === "_" || c === "~") && (m = emphasis(text, i))) {
        flush();
        const [outer, inner] = m.tag.split(" ");
        const n = out.appendChild(el(outer));
        inline(m.inner, inner ? n.appendChild(el(inner)) : n);
        i = m.end;
      } else if ((c === "[" || (c === "!" && text[i + 1] === "[")) && (m = link(text, i))) {
        flush();
        const url = safeURL(m.url);
        if (!url) inline(m.label, out); // javascript:, data: and the rest stay text
        else if (m.img) anchor(url, out, "🖼 " + (m.label || url)).className = "imglink";
        else anchor(url, out, m.label);
        i = m.end;
      } else if (c === "<" && (m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(text.slice(i)))) {
        flush();
        anchor(m[1], out);
        i += m[0].length;
      } else if (c === "h" && (i === 0 || /[\s(]/.test(text[i - 1])) && (m = /^https?:\/\/[^\s<>]+/.exec(text.slice(i)))) {
        const url = m[0].replace(/[.,;:!?'")\]]+$/, "");
        flush();
        anchor(url, out);
        i += url.length;
      } else {
        buf += c;
        i++;
      }
    }
    flush();
  }

  // ---- code blocks and highlighting ----
  function codeBlock(code, lang) {
    lang = (lang || "").toLowerCase().replace(/[^\w+#.-]/g, "");
    const box = el("div", "codeblock");
    const head = box.appendChild(el("div", "codehead"));
    head.appendChild(el("span", "lang", lang || "text"));
    head.appendChild(el("button", "copy-code", "Copy")).type = "button";
    const c = el("code", "hljs" + (lang ? " language-" + lang : ""));
    highlight(code, lang, c);
    box.appendChild(el("pre")).appendChild(c);
    return box;
  }

  const words = (s) => new Set(s.split(/\s+/).filter(Boolean));
  const LANGS = {};
  function def(names, spec) {
    const parts = [];
    if (spec.block) parts.push("\\/\\*[\\s\\S]*?(?:\\*\\/|$)");
    if (spec.line) parts.push("\\/\\/.*");
    if (spec.hash) parts.push("(?<![^\\s;|&(])#.*");
    const comment = parts.join("|");
    const str = [];
    if (spec.triple) str.push('"""[\\s\\S]*?(?:"""|$)', "'''[\\s\\S]*?(?:'''|$)");
    for (const q of spec.quotes) {
      str.push(q === "`" ? "`(?:\\\\[\\s\\S]|[^`\\\\])*(?:`|$)" : q + "(?:\\\\.|[^" + q + "\\\\\\n])*" + q);
    }
    const src = [
      comment && "(?<c>" + comment + ")",
      "(?<s>" + str.join("|") + ")",
      "(?<n>\\b(?:0[xXbBoO][\\da-fA-F_]+|\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?)\\b)",
      spec.vars && "(?<v>\\$\\{[^}\\n]*\\}|\\$[A-Za-z_]\\w*|\\$[0-9@#?*$!])",
      "(?<w>[A-Za-z_$][\\w$]*)",
    ].filter(Boolean).join("|");
    const lang = Object.assign({ re: new RegExp(src, "gm") }, spec);
    for (const n of names.split(" ")) LANGS[n] = lang;
  }
  def("js javascript mjs cjs jsx ts typescript tsx", {
    line: true, block: true, quotes: "\"'`",
    kw: words(`as async await break case catch class const continue debugger declare default delete do else enum export
      extends finally for from function if implements import in instanceof interface let new of readonly return static
      super switch this throw try type typeof var void while with yield`),
    lit: words("true false null undefined NaN Infinity"),
  });
  def("json jsonc json5", { line: true, block: true, quotes: "\"", kw: words(""), lit: words("true false null"), keys: true });
  def("py python python3", {
    hash: true, triple: true, quotes: "\"'",
    kw: words(`and as assert async await break class continue def del elif else except finally for from global if import
      in is lambda match case nonlocal not or pass raise return try while with yield`),
    lit: words("True False None"),
  });
  def("go golang", {
    line: true, block: true, quotes: "\"'`",
    kw: words(`break case chan const continue default defer else fallthrough for func go goto if import interface map
      package range return select struct switch type var any bool byte error int int64 uint uint64 float64 string`),
    lit: words("true false nil iota"),
  });
  def("c h cpp c++ cc cxx hpp rust rs java kotlin kt cs csharp swift zig", {
    line: true, block: true, quotes: "\"'",
    kw: words(`auto bool break case catch char class const constexpr continue default delete do double else enum explicit
      extern final float fn for friend goto if impl import inline int let long loop match mod mut namespace new operator
      override package private protected pub public ref return self short signed sizeof static struct super switch
      template this throw trait try typedef typename union unsafe unsigned use using var virtual void volatile where while
      u8 u16 u32 u64 usize i8 i16 i32 i64 isize f32 f64 str String Vec Option Result`),
    lit: words("true false null nullptr NULL None Some Ok Err"),
  });
  def("sh bash shell zsh console shellsession", {
    hash: true, quotes: "\"'", vars: true,
    kw: words("if then else elif fi for while until do done case esac in function return export local readonly set unset exit"),
    lit: words("true false"),
  });

  // highlight writes code into out, as hljs-classed spans where lang is known
  // (so the page's colours read like highlight.js's familiar themes).
  function highlight(code, lang, out) {
    const L = LANGS[lang];
    if (!L) { out.textContent = code; return; }
    const span = (cls, text) => out.appendChild(el("span", "hljs-" + cls, text));
    let last = 0;
    L.re.lastIndex = 0;
    for (let m; (m = L.re.exec(code));) {
      if (m[0] === "") { L.re.lastIndex++; continue; }
      if (m.index > last) out.appendChild(document.createTextNode(code.slice(last, m.index)));
      const g = m.groups, end = m.index + m[0].length;
      if (g.c) span("comment", m[0]);
      else if (g.s) span(L.keys && /^\s*:/.test(code.slice(end)) ? "attr" : "string", m[0]);
      else if (g.n) span("number", m[0]);
      else if (g.v) span("variable", m[0]);
      else if (L.kw.has(m[0])) span("keyword", m[0]);
      else if (L.lit.has(m[0])) span("literal", m[0]);
      else if (/^\s*\(/.test(code.slice(end, end + 40))) span("title function_", m[0]);
      else out.appendChild(document.createTextNode(m[0]));
      last = end;
    }
    if (last < code.length) out.appendChild(document.createTextNode(code.slice(last)));
  }

  return { render, highlight, safeURL };
})();
