#!/usr/bin/env python3
"""Checks TaskServer's Markdown documentation against the repository and the built binary.

    python3 scripts/check-docs.py PATH/TO/taskserver [FILES...]
    python3 scripts/check-docs.py --self-test PATH/TO/taskserver

FILES default to README.md, docs/**/*.md and examples/README.md (Tests/docs/, the self-test's
fixtures, is never in the default list). Every failure is printed as `FILE:LINE: message` (with
indented detail lines after some); then each page's run time and a summary. The exit status is 0
when every check passed, 1 otherwise, 2 on a usage error. Python 3.11 standard library only.

This docstring is the reference for doc writers: what each check does, exactly.

Code is recognised as on GitHub: a fenced block opens with ``` or ~~~ (3 or more, any
indentation; the first word after the fence is its language) and closes with the same character,
at least as many; an inline code span is a run of N backticks up to the next run of exactly N
backticks within one paragraph (a paragraph ends at a blank line, a heading, a table row or a list
item). HTML comments (`<!-- … -->`) are neither prose nor links.

1. Links and anchors. Every `[text](target)`, `![alt](target)`, reference definition
   `[label]: target`, `<a href="target">`, `<img src="target">` and `<source srcset="target">`
   outside code whose target is
   relative (no `scheme:` such as http:, https:, mailto:, and not `//host`) must name an existing
   file or directory: relative to the page, or to the repository root when it starts with `/`
   (percent-escapes decoded, `?query` ignored), inside the repository. A `#anchor` (alone: this
   page; after a path: that page — a .md file, or a directory's README.md; anchors into other
   files, such as `#L10`, are not checked) must be one of the target page's anchors:
     - each heading's slug, as GitHub computes it: the heading's text (code spans keep their
       content; links keep their text; images, HTML tags and emphasis marks go), lowercased;
       every character that is not a letter, a mark, a digit, `_`, `-` or a space removed
       (Unicode letters stay; emoji and punctuation go); each space becomes `-`. The second
       heading with the same slug gets `-1`, the third `-2`, and so on, in page order;
       ATX (`## Title`) and setext (`Title` over `===`/`---`) headings count;
     - each `id="…"` of an HTML tag, and each `<a name="…">`, outside code.
   Anchors compare exactly (case included).

2. Flags. The binary's command tree is read from `BIN --experimental-dump-help` (JSON; aliases
   such as `status` for `get` and the default subcommand, which it omits, from the SUBCOMMANDS
   section of `BIN [GROUP] --help`), or, if that fails, from `BIN --help` and `BIN SUB… --help`,
   recursively. Each command's long flags are its own plus argument-parser's built-ins where the
   binary accepts them (`--help`, `--version`, `--experimental-dump-help`,
   `--generate-completion-script`; probed on the root and the deepest command: accepted by both,
   they count for every command; otherwise each command is probed).
   (a) In fenced blocks whose language is sh, bash, shell, console, zsh, text or none (not the
       expected output of a runnable block, see 3.): each logical line (trailing-backslash
       lines joined; a `$ ` prompt dropped; a heredoc's body skipped) is split like the shell
       does — quotes, `#` comments, redirections, and the operators `|`, `||`, `&&`, `;`, `&`,
       `(`, `)`, `$(` and backquotes, each of which ends a simple command. A simple command
       invokes taskserver when its command word (after variable assignments, `sudo`, `env`,
       `timeout`, `nice` and their options, `time`, `exec`, `nohup`, `command`, `!`, `{`,
       `if`/`then`/`do`/…) is `taskserver` or a path ending in `/taskserver`; for
       `swift run … taskserver ARGS` the words after `taskserver`; for `make run ARGS="…"` the
       words of ARGS, as `serve` flags. The words after taskserver up to the first one starting
       with `-` name the subcommand (`definitions apply`; `help SUB…` names SUB); none is the
       default subcommand (serve). A first word that could be a subcommand's name
       (`[a-z][a-z0-9-]*`) but is none fails where the command takes no positional argument
       (placeholders such as SUB, <cmd>, $cmd, … are not checked). Every `--flag` (or
       `--flag=value`; a leading `[` or `(` as in a synopsis is ignored) of that simple command
       must belong to the subcommand or one of its parents (for none: to the root or the
       default subcommand). A lone `--` ends the options (what follows is the worker's
       command). Other programs' flags in code blocks are not checked.
   (b) In prose and inline code spans, each `--flag` token (`(?<![\\w-])--[a-z][a-z0-9-]+`; not
       in a link's destination or an HTML tag) must be a flag of some taskserver command, except:
         - in an inline span that is itself a taskserver command line (as in (a), e.g.
           `taskserver submit --watch`), each flag must belong to that subcommand, as in (a);
         - a flag listed in FOREIGN_FLAGS below (with the programs it belongs to) passes when
           one of its programs is named, as a word (case-insensitively; a path before it is
           fine), on the flag's line or in the flag's inline span, e.g. "Docker's `--rm`" or
           `docker run --rm …`. Any other flag fails, naming the file to add it to.
   `<!-- run-server: FLAGS -->` flags must be `serve` flags.

3. Runnable blocks. A ```sh or ```bash block whose nearest non-blank line above is
   `<!-- run -->` is runnable. For each page that has any, the checker:
     - starts a fresh server: `BIN serve --memory --log-format json FLAGS --port 0`, FLAGS from
       the page's `<!-- run-server: FLAGS -->` (shell words; at most one such line); the
       server's address is read from its "taskserver listening" log line, as scripts/server.sh
       and scripts/testserver.py do (the latter is what starts it);
     - writes one bash script that runs the page's runnable blocks in page order, in one bash
       process under `set -euo pipefail`, each as `{ BLOCK\\n} >out.N 2>err.N` (a group, not a
       subshell: variables, functions and `cd` carry over to the next block); a marker file
       records the running block and, at exit, the block that ended the script and its status;
     - before that, replaces `http://localhost:8080` and `http://127.0.0.1:8080` in each block with
       the server's URL (http://127.0.0.1:PORT), and `localhost:8080`, `127.0.0.1:8080` with
       127.0.0.1:PORT;
     - runs it with bash, stdin from /dev/null, in a fresh temporary directory (the server's
       working directory too) holding a copy of
       the repository's examples/ and openapi.yaml (so blocks can use `examples/…`), with BIN's
       directory first on PATH (`taskserver …` is the binary under test), TASKSERVER_URL set to
       the server's URL, and every other inherited TASKSERVER_* variable removed (for the
       server too);
     - bounds the page's blocks by 60 s (`<!-- run-timeout: N -->` on the page sets N seconds),
       then kills the script's process group (background jobs a block started go too) and the
       server.
   A block that exits non-zero fails at its opening fence's line, with the tail of its stderr
   and stdout; later blocks do not run. A block that ends the script early (`exit 0`) fails when
   blocks follow it. The server exiting before the end fails too, with its log's tail.
   Expected output: when `<!-- output -->` follows a runnable block (blank lines allowed around
   it) and a fenced block (any language) follows that, the runnable block's stdout must match
   the fenced block's text. Both sides: trailing whitespace stripped from each line, leading and
   trailing blank lines dropped; then line by line, where `…` inside an expected line matches
   any text on that line and an expected line that is only `…` matches zero or more whole lines
   (with backtracking). The first mismatch is reported at the expected line, with the expected
   and actual lines. A `<!-- run -->` not followed by a sh/bash block, an `<!-- output -->` not
   after a runnable block or not followed by a fenced block, a second `<!-- run-server -->`, one
   with a flag `serve` lacks (the page's blocks then do not run) or on a page with no runnable
   block, and a `<!-- run… -->` directive the checker does not know fail. Directives inside
   fenced blocks are ignored.

4. Self-test: `--self-test BIN` checks the slug, output-matching and shell-splitting rules on a
   few cases, then checks each page in Tests/docs/: good*.md must pass; bad-*.md must fail with
   exactly the failures its `<!-- expect-failure: LINE: TEXT -->` lines name (TEXT a substring
   of the message). Other files there are only link targets. Exit 0 when every verdict is right.
"""
import argparse
import concurrent.futures
import dataclasses
import html
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unicodedata
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "Tests" / "docs"
sys.path.insert(0, str(REPO / "scripts"))
from testserver import ServerStartError, TestServer  # noqa: E402  (scripts/testserver.py)

DEFAULT_TIMEOUT = 60
SERVER_ARGS = ["--memory", "--log-format", "json"]  # + run-server flags; TestServer adds --port 0
SHELL_LANGS = {"", "sh", "bash", "shell", "console", "zsh", "text", "shell-session"}
RUNNABLE_LANGS = {"sh", "bash"}
BUILTIN_FLAGS = ["--help", "--experimental-dump-help", "--version", "--generate-completion-script"]

# Flags of other programs that the docs mention in prose or inline code, with the programs they
# belong to. Such a flag passes where one of its programs is named on the same line or in the same
# inline code span. Built from the checker's hits on README.md, docs/*.md and examples/README.md
# (and on README.md as committed before the docs/ split), each checked against its program; add
# to it only after checking that the flag is that program's.
FOREIGN_FLAGS = {
    # Docker's CLI: `docker run --rm --entrypoint cat …`, `docker run --ulimit nofile=8192`,
    # `docker compose … up --build`
    "--build": ("docker",),
    "--entrypoint": ("docker",),
    "--rm": ("docker",),
    "--ulimit": ("docker",),
    # SwiftPM: `swift build -c release --static-swift-stdlib`, `swift build --product taskserver`,
    # `swift test --sanitize=thread`
    "--product": ("swift",),
    "--sanitize": ("swift",),
    "--static-swift-stdlib": ("swift",),
    # the repository's own scripts (their argparse options)
    "--async": ("failover-test.py",),
    "--promote-after": ("failover-test.py",),
    "--servers": ("failover-test.py",),
    "--asleep": ("batch-bench.py",),
    "--pgqueuer": ("batch-bench.py",),
    "--burst": ("sse-bench.py",),
    "--bin": ("worker-bench.py", "sse-bench.py"),
    "--skip-latency": ("worker-bench.py",),
}
# A program is named by its name as a word (a path before it is fine: scripts/failover-test.py),
# case-insensitively.
PROGRAM_WORD = r"(?<![\w.-]){}(?![\w-])"


# --------------------------------------------------------------------------------------- pages

@dataclasses.dataclass
class Fence:
    start: int       # line of the opening fence (1-based)
    end: int         # line of the closing fence (the last line when unclosed)
    lang: str
    body: list       # the lines between the fences, the fence's indentation removed
    body_start: int  # line of body[0]


@dataclasses.dataclass
class Span:
    line: int        # line where the span starts
    text: str        # its content


@dataclasses.dataclass
class Page:
    path: Path
    lines: list      # raw lines, without newlines
    fences: list
    prose: list      # lines outside fences, HTML comments blanked ("" for fence lines)
    bare: list       # prose with code spans blanked too
    spans: list      # inline code spans


FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
BLOCK_BOUNDARY = re.compile(r"^\s*(#{1,6}(\s|$)|\||([-*+]|\d+[.)])\s)")


def parse_page(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    fences, in_fence = [], [False] * len(lines)
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in lines[i][m.end(2):]):
            i += 1
            continue
        indent, marker = len(m.group(1)), m.group(2)
        close = re.compile(r"^\s*" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        end = min(j, len(lines) - 1)
        body = [strip_indent(line, indent) for line in lines[i + 1:j]]
        fences.append(Fence(i + 1, end + 1, m.group(3).lower(), body, i + 2))
        for k in range(i, end + 1):
            in_fence[k] = True
        i = j + 1
    outside = "\n".join("" if in_fence[k] else line for k, line in enumerate(lines))
    outside = HTML_COMMENT.sub(lambda c: re.sub(r"[^\n]", " ", c.group(0)), outside)
    prose = outside.split("\n")
    bare, spans = mask_code_spans(prose)
    return Page(path, lines, fences, prose, bare, spans)


def strip_indent(line, indent):
    k = 0
    while k < indent and k < len(line) and line[k] == " ":
        k += 1
    return line[k:]


def code_spans(text):
    """(start, end, content) of each inline code span of one paragraph's text."""
    spans, i, n = [], 0, len(text)
    while i < n:
        if text[i] == "\\":
            i += 2
            continue
        if text[i] != "`":
            i += 1
            continue
        j = i
        while j < n and text[j] == "`":
            j += 1
        run, k, close = j - i, j, -1
        while k < n:
            if text[k] != "`":
                k += 1
                continue
            m = k
            while m < n and text[m] == "`":
                m += 1
            if m - k == run:
                close = k
                break
            k = m
        if close < 0:
            i = j
            continue
        content = text[j:close].replace("\n", " ")
        if len(content) > 1 and content.startswith(" ") and content.endswith(" ") and content.strip():
            content = content[1:-1]
        spans.append((i, close + run, content))
        i = close + run
    return spans


def mask_code_spans(prose):
    """The lines with every inline code span blanked, and the spans."""
    bare, spans = list(prose), []
    chunk = []

    def flush():
        if not chunk:
            return
        text = "\n".join(prose[k] for k in chunk)
        starts, offset = [], 0
        for k in chunk:
            starts.append(offset)
            offset += len(prose[k]) + 1
        chars = list(text)
        for start, end, content in code_spans(text):
            line = chunk[max(x for x in range(len(starts)) if starts[x] <= start)] + 1
            spans.append(Span(line, content))
            for p in range(start, end):
                if chars[p] != "\n":
                    chars[p] = " "
        for k, masked in zip(chunk, "".join(chars).split("\n"), strict=True):
            bare[k] = masked
        chunk.clear()

    for k, line in enumerate(prose):
        if not line.strip():
            flush()
            continue
        if BLOCK_BOUNDARY.match(line):
            flush()
        chunk.append(k)
    flush()
    return bare, spans


# ------------------------------------------------------------------------------------- anchors

ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
NOT_SETEXT_TEXT = re.compile(r"^\s*([-*+>|]|\d+[.)]\s|#|<)")
TAG = re.compile(r"<([A-Za-z][A-Za-z0-9]*)\b([^>]*)>")
ATTR = re.compile(r"([A-Za-z_:][-\w:.]*)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s\"'=<>`]+))")


def heading_text(raw):
    """A heading's text as GitHub renders it (before the slug)."""
    out, pos = [], 0
    for start, end, content in code_spans(raw):
        out.append(strip_inline_markdown(raw[pos:start]))
        out.append(content)
        pos = end
    out.append(strip_inline_markdown(raw[pos:]))
    return "".join(out).strip()


def strip_inline_markdown(text):
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)                   # images
    text = re.sub(r"\[([^\]]*)\](\([^)]*\)|\[[^\]]*\])", r"\1", text)  # links
    text = re.sub(r"<[^>]+>", "", text)                                # HTML tags
    text = re.sub(r"(?<!\w)(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)", r"\2", text)  # _emphasis_
    text = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)                 # backslash escapes
    return html.unescape(text)


def slug(text):
    """GitHub's anchor for a heading text (without the -N of duplicates)."""
    kept = []
    for ch in text.strip().lower():
        category = unicodedata.category(ch)
        if category[0] in "LM" or category in ("Nd", "Nl", "Pc") or ch in " -":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def page_anchors(page):
    """Every anchor of a page: heading slugs (duplicates numbered) and HTML ids/names."""
    headings = []
    for k, line in enumerate(page.prose):
        m = ATX.match(line.rstrip())
        if m:
            headings.append(m.group(2) or "")
            continue
        above = page.prose[k - 1] if k > 0 else ""
        if SETEXT.match(line) and above.strip() and not ATX.match(above) and not NOT_SETEXT_TEXT.match(above):
            first = k - 1
            while first > 0 and page.prose[first - 1].strip() and not NOT_SETEXT_TEXT.match(page.prose[first - 1]):
                first -= 1
            headings.append(" ".join(page.prose[x].strip() for x in range(first, k)))
    anchors, seen = set(), {}
    for raw in headings:
        base = slug(heading_text(raw))
        if base in seen:
            seen[base] += 1
            anchors.add(f"{base}-{seen[base]}")
        else:
            seen[base] = 0
            anchors.add(base)
    for tag, attrs in html_tags(page):
        if "id" in attrs:
            anchors.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            anchors.add(attrs["name"])
    return anchors


def html_tags(page):
    """[(tag, {attribute: value})] of the HTML tags outside code."""
    text = "\n".join(page.bare)
    found = []
    for m in TAG.finditer(text):
        attrs = {}
        for a in ATTR.finditer(m.group(2)):
            attrs[a.group(1).lower()] = html.unescape(next(v for v in a.groups()[1:] if v is not None))
        found.append((m.group(1).lower(), attrs))
    return found


# --------------------------------------------------------------------------------------- links

def link_targets(page):
    """(line, target) of every link, image, reference definition and <a href>/<img src>."""
    text = "\n".join(page.bare)
    line_starts = [0]
    for line in page.bare:
        line_starts.append(line_starts[-1] + len(line) + 1)

    def line_of(offset):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    found = []
    for m in re.finditer(r"(?<!\\)\]\(", text):
        dest = link_destination(text, m.end())
        if dest:
            found.append((line_of(m.start()), dest))
    for k, line in enumerate(page.bare):
        m = re.match(r"^ {0,3}\[([^\]^][^\]]*)\]:[ \t]+(<[^>]*>|\S+)", line)
        if m:
            found.append((k + 1, m.group(2).strip("<>")))
    for m in TAG.finditer(text):
        tag = m.group(1).lower()
        want = {"a": "href", "img": "src", "source": "srcset"}.get(tag)
        if not want:
            continue
        for a in ATTR.finditer(m.group(2)):
            if a.group(1).lower() == want:
                value = html.unescape(next(v for v in a.groups()[1:] if v is not None))
                found.append((line_of(m.start()), value.split()[0] if value.split() else value))
    return found


def link_destination(text, i):
    """The destination of an inline link whose `(` ends just before offset i."""
    n = len(text)
    while i < n and text[i] in " \t\n":
        i += 1
    if i < n and text[i] == "<":
        end = text.find(">", i)
        return text[i + 1:end] if end > 0 else ""
    depth, out = 0, []
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            out.append(text[i + 1])
            i += 2
            continue
        if c in " \t\n":
            break
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        out.append(c)
        i += 1
    return "".join(out)


def is_external(target):
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target)) or target.startswith("//")


class Checker:
    """Checks pages; collects failures (file, line, message) and counts."""

    def __init__(self, cli, binary):
        self.cli = cli
        self.binary = binary
        self.failures = []
        self.counts = {"files": 0, "links": 0, "flags": 0, "blocks": 0, "outputs": 0}
        self._pages = {}

    def fail(self, path, line, message):
        self.failures.append((display(path), line, message))

    def page(self, path):
        path = Path(os.path.abspath(path))
        if path not in self._pages:
            self._pages[path] = parse_page(path)
        return self._pages[path]

    def anchors_of(self, path):
        page = self.page(path)
        if not hasattr(page, "anchors"):
            page.anchors = page_anchors(page)
        return page.anchors

    # ----- 1. links and anchors

    def check_links(self, page):
        for line, target in link_targets(page):
            if not target or is_external(target):
                continue
            self.counts["links"] += 1
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part.split("?")[0])
            anchor = urllib.parse.unquote(anchor)
            if path_part:
                base = REPO if path_part.startswith("/") else page.path.parent
                resolved = Path(os.path.normpath(base / path_part.lstrip("/")))
                if not resolved.exists():
                    self.fail(page.path, line, f"broken link: {target} ({display(resolved)} does not exist)")
                    continue
                if resolved != REPO and REPO not in resolved.parents:
                    self.fail(page.path, line, f"link leaves the repository: {target}")
                    continue
            else:
                resolved = page.path
            if not anchor:
                continue
            if resolved.is_dir():
                resolved = resolved / "README.md"
                if not resolved.is_file():
                    continue
            if resolved.suffix.lower() not in (".md", ".markdown"):
                continue
            anchors = self.anchors_of(resolved)
            if anchor not in anchors:
                hint = [a for a in anchors if a.lower() == anchor.lower()]
                near = f" (did you mean #{hint[0]}?)" if hint else ""
                self.fail(page.path, line, f"broken anchor: {target} (no heading or id '{anchor}' in "
                                           f"{display(resolved)}){near}")

    # ----- 2. flags

    def check_flags(self, page):
        outputs = {expected.start for _, expected in self.directives(page, report=False)[0] if expected}
        for fence in page.fences:
            if fence.lang in SHELL_LANGS and fence.start not in outputs:
                for _, tokens in logical_lines(fence):
                    for words in simple_commands(tokens):
                        self.check_invocation(page, words)
        for span in page.spans:
            self.check_text_flags(page, span.line, span.text, span=True, context=page.prose[span.line - 1])
        for k, line in enumerate(page.bare):
            line = LINK_DESTINATION.sub(lambda m: " " * len(m.group(0)), line)  # URLs are no prose
            self.check_text_flags(page, k + 1, line, span=False, context=page.prose[k])

    def check_invocation(self, page, words):
        """Checks one simple command when it invokes taskserver; True if it does."""
        found = find_invocation(words)
        if found is None:
            return False
        args, forced = found
        node, path, idx = self.cli, [], 0
        if forced:
            for name in forced:
                node = node.children[name]
                path.append(name)
        else:
            while idx < len(args):
                word = args[idx].text
                if word.startswith("-"):
                    break
                if word == "help" and node is self.cli:
                    self.check_help_path(page, args[idx + 1:])
                    return True
                child = node.children.get(word)
                if child is None:
                    # A placeholder (SUB, <command>, $cmd, …) names no subcommand to check.
                    if node.children and not node.accepts_positionals(self.cli) and SUBCOMMAND_WORD.match(word):
                        self.fail(page.path, args[idx].line, f"unknown taskserver subcommand: "
                                  f"{' '.join(['taskserver', *path, word])}")
                        return True
                    break
                node, idx = child, idx + 1
                path.append(word)
        allowed = self.cli.allowed(path)
        name = "taskserver " + " ".join(path) if path else "taskserver"
        for tok in args[idx:]:
            if tok.text == "--":
                break
            m = FLAG_WORD.match(tok.text)
            if not m:
                continue
            self.counts["flags"] += 1
            if m.group(1) not in allowed:
                self.fail(page.path, tok.line, f"unknown flag {m.group(1)} for `{name}`")
        return True

    def check_help_path(self, page, args):
        node = self.cli
        for tok in args:
            if tok.text.startswith("-"):
                break
            if tok.text not in node.children:
                if SUBCOMMAND_WORD.match(tok.text):
                    self.fail(page.path, tok.line, f"unknown taskserver subcommand in `help`: {tok.text}")
                return
            node = node.children[tok.text]

    def check_text_flags(self, page, line, text, span, context):
        """(b): the flags of an inline span (span=True) or of a prose line (its spans blanked);
        `context` is the line's prose, where another program may be named."""
        if span:
            commands = list(simple_commands(lex(text, lambda offset: line)))
            if [words for words in commands if self.check_invocation(page, words)]:
                # A taskserver command line: checked per subcommand; the other commands of the
                # span (after a pipe, say) are checked like prose below.
                text = " ".join(w.text for words in commands if find_invocation(words) is None for w in words)
        names = f"{text}\n{context}"  # where a program may be named: the span, and its line
        for m in PROSE_FLAG.finditer(text):
            flag = m.group(0)
            self.counts["flags"] += 1
            if flag in self.cli.all_flags:
                continue
            owners = FOREIGN_FLAGS.get(flag, ())
            if any(re.search(PROGRAM_WORD.format(re.escape(owner)), names, re.IGNORECASE)
                   for owner in owners):
                continue
            if owners:
                self.fail(page.path, line, f"{flag} is not a taskserver flag; it is {' or '.join(owners)}'s, "
                                           f"but this line does not name {' or '.join(owners)}")
            else:
                self.fail(page.path, line, f"unknown flag {flag}: no taskserver command has it (another "
                                           f"program's? add it to FOREIGN_FLAGS in {display(Path(__file__))})")

    # ----- 3. runnable blocks

    def directives(self, page, report=True):
        """The page's run directives: (runnable [(fence, expected fence or None)] — none when the
        run-server flags are wrong —, server flags, timeout, the run-server line)."""
        fail = self.fail if report else (lambda *args: None)
        fence_at = {f.start: f for f in page.fences}
        in_fence = set()
        for f in page.fences:
            in_fence.update(range(f.start, f.end + 1))
        runnable, server_flags, timeout, server_line = [], [], DEFAULT_TIMEOUT, None
        used_output, server_ok = set(), True
        for k, raw in enumerate(page.lines, start=1):
            if k in in_fence:
                continue
            m = re.match(r"^\s*<!--\s*(run[\w-]*|output)\s*(?::\s*(.*?))?\s*-->\s*$", raw)
            if not m:
                continue
            kind, value = m.group(1), m.group(2)
            if kind == "run" and value is None:
                nxt = next_nonblank(page.lines, k + 1)
                fence = fence_at.get(nxt)
                if fence is None or fence.lang not in RUNNABLE_LANGS:
                    fail(page.path, k, "<!-- run --> must be followed by a ```sh or ```bash block")
                    continue
                expected = None
                after = next_nonblank(page.lines, fence.end + 1)
                if after and re.match(r"^\s*<!--\s*output\s*-->\s*$", page.lines[after - 1]):
                    used_output.add(after)
                    expected = fence_at.get(next_nonblank(page.lines, after + 1))
                    if expected is None:
                        fail(page.path, after, "<!-- output --> must be followed by a fenced block")
                runnable.append((fence, expected))
            elif kind == "output" and value is None:
                if k not in used_output:
                    fail(page.path, k, "<!-- output --> must follow a runnable block (<!-- run --> + ```sh)")
            elif kind == "run-server" and value is not None:
                if server_line is not None:
                    fail(page.path, k, f"a second <!-- run-server --> (the first is at line {server_line})")
                    continue
                server_line = k
                try:
                    server_flags = shlex.split(value)
                except ValueError as error:
                    fail(page.path, k, f"<!-- run-server -->: {error}")
                    server_ok = False
                    continue
                serve = self.cli.allowed(["serve"])
                for word in server_flags:
                    fm = FLAG_WORD.match(word)
                    if fm:
                        self.counts["flags"] += 1 if report else 0
                        if fm.group(1) not in serve:
                            server_ok = False
                            fail(page.path, k, f"unknown flag {fm.group(1)} for `taskserver serve` "
                                                    "in <!-- run-server -->")
            elif kind == "run-timeout" and value is not None and re.fullmatch(r"\d+", value) and int(value) > 0:
                timeout = int(value)
            else:
                fail(page.path, k, f"unknown directive {raw.strip()} (known: <!-- run -->, <!-- output -->, "
                                        "<!-- run-server: FLAGS -->, <!-- run-timeout: SECONDS -->)")
        if server_line is not None and not runnable:
            fail(page.path, server_line, "<!-- run-server --> on a page with no runnable block")
        return (runnable if server_ok else []), server_flags, timeout, server_line

    def run_blocks(self, page):
        runnable, server_flags, timeout, server_line = self.directives(page)
        if not runnable:
            return
        first_line = runnable[0][0].start
        for flag in SERVER_ARGS + ["--port"]:
            if flag.startswith("--") and flag not in self.cli.allowed(["serve"]):
                self.fail(page.path, first_line, f"`taskserver serve` has no {flag}: cannot start a server")
                return
        temp = Path(tempfile.mkdtemp(prefix="check-docs-"))
        work = temp / "work"  # the blocks' working directory; the checker's own files are beside it
        work.mkdir()
        server = None
        try:
            for name in ("examples", "openapi.yaml"):
                source = REPO / name
                if source.is_dir():
                    shutil.copytree(source, work / name, symlinks=True)
                elif source.exists():
                    shutil.copy2(source, work / name)
            env = {k: v for k, v in os.environ.items() if not k.startswith("TASKSERVER_")}
            try:
                server = TestServer(str(self.binary), SERVER_ARGS + server_flags, env=env, cwd=str(work),
                                    log=str(temp / "server.log"))
            except ServerStartError as error:
                self.fail(page.path, server_line or first_line,
                          "the server did not start:\n" + indent(tail(str(error), 20)))
                return
            env["PATH"] = f"{self.binary.parent}{os.pathsep}{env.get('PATH', '')}"
            env["TASKSERVER_URL"] = server.url
            self.run_script(page, runnable, server, env, work, temp / "results", timeout)
            status = server.proc.poll()
            if status is not None:
                self.fail(page.path, server_line or first_line,
                          f"the server exited with status {status} while the page's blocks ran:\n"
                          + indent(tail(server.log_text(), 15)))
        finally:
            if server is not None:
                server.stop(timeout=10)
                server._log.close()  # TestServer keeps its log open for appending
            shutil.rmtree(temp, ignore_errors=True)

    def run_script(self, page, runnable, server, env, work, results, timeout):
        """Runs the page's runnable blocks in one bash script in `work`; checks their outputs."""
        results.mkdir()
        mark = results / "mark"
        script = ["set -euo pipefail", f"__check_docs_mark={shlex.quote(str(mark))}", "__check_docs_block=0",
                  ("trap '__check_docs_status=$?; printf \"%s %s\\n\" \"$__check_docs_block\" "
                   "\"$__check_docs_status\" >\"$__check_docs_mark\"' EXIT")]
        doc_line = {}  # the script's line numbers → the page's
        for n, (fence, _) in enumerate(runnable, start=1):
            script += [f"__check_docs_block={n}", f"printf 'running {n}\\n' >\"$__check_docs_mark\"", "{"]
            for k, line in enumerate(fence.body):
                doc_line[len(script) + 1] = fence.body_start + k
                script.append(substitute_url(line, server))
            script += [f"}} >{shlex.quote(str(results / f'out.{n}'))} 2>{shlex.quote(str(results / f'err.{n}'))}"]
        script.append("__check_docs_block=done")
        (results / "page.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
        self.counts["blocks"] += len(runnable)
        with open(results / "script.log", "wb") as log:
            proc = subprocess.Popen(["bash", str(results / "page.sh")], cwd=str(work), env=env,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            kill_group(proc)
        mark_text = mark.read_text().split() if mark.exists() else []

        def output(n, kind):
            f = results / f"{kind}.{n}"
            return f.read_text(encoding="utf-8", errors="replace") if f.exists() else ""

        def located(text):
            """bash's `…/page.sh: line N:` as the page's `FILE:LINE:`."""
            return re.sub(r"\S*page\.sh: line (\d+):", lambda m: f"{display(page.path)}:"
                          f"{doc_line.get(int(m.group(1)), '?')}:", text)

        def details(n):
            parts = []
            for kind, label in (("err", "stderr"), ("out", "stdout")):
                text = output(n, kind).rstrip()
                if text:
                    parts.append(f"{label} (last lines):\n" + indent(tail(text, 12)))
            script_log = (results / "script.log").read_text(errors="replace").strip()
            if script_log:
                parts.append("bash:\n" + indent(tail(script_log, 6)))
            return ("\n" + indent(located("\n".join(parts)))) if parts else ""

        completed = len(runnable)
        if timed_out:
            # "running N", or "N STATUS" when bash's EXIT trap ran on the SIGTERM.
            n = next((int(x) for x in mark_text[:2] if x.isdigit()), 1)
            self.fail(page.path, runnable[n - 1][0].start,
                      f"runnable block timed out: the page's blocks ran over {timeout} s "
                      f"(<!-- run-timeout: N --> sets the bound)" + details(n))
            completed = n - 1
        elif len(mark_text) == 2 and mark_text[0] != "done":
            n, status = (int(mark_text[0]) if mark_text[0].isdigit() else 0), mark_text[1]
            if n == 0:
                self.fail(page.path, runnable[0][0].start, f"the page's script failed before its first block "
                                                           f"(exit status {status})" + details(0))
                completed = 0
            elif status != "0":
                self.fail(page.path, runnable[n - 1][0].start,
                          f"runnable block failed (exit status {status})" + details(n))
                completed = n - 1
            elif n < len(runnable):
                self.fail(page.path, runnable[n - 1][0].start,
                          f"runnable block ended the page's script (exit 0): the {len(runnable) - n} "
                          "block(s) after it did not run")
                completed = n
        elif not mark_text:
            self.fail(page.path, runnable[0][0].start, "the page's script left no exit marker" + details(0))
            completed = 0
        for n, (fence, expected) in enumerate(runnable[:completed], start=1):
            if expected is None:
                continue
            self.counts["outputs"] += 1
            mismatch = compare_output(expected.body, output(n, "out"))
            if mismatch:
                exp_index, want, got = mismatch
                line = expected.body_start + exp_index if exp_index is not None else expected.end
                self.fail(page.path, line, f"output of the runnable block at line {fence.start} differs:\n"
                                           f"    expected: {want}\n    actual:   {got}")

    # ----- all

    def check_page(self, path):
        page = self.page(path)
        self.counts["files"] += 1
        self.check_links(page)
        self.check_flags(page)
        self.run_blocks(page)


def next_nonblank(lines, k):
    """The 1-based number of the first non-blank line from line k on (None at the end)."""
    while k <= len(lines):
        if lines[k - 1].strip():
            return k
        k += 1
    return None


URL_8080 = re.compile(r"(https?://)?(?:localhost|127\.0\.0\.1):8080(?!\d)")


def substitute_url(line, server):
    return URL_8080.sub(lambda m: server.url if m.group(1) else f"127.0.0.1:{server.port}", line)


def kill_group(proc):
    """Ends the page script's process group: the script and whatever it left running (SIGTERM,
    up to 2 s for bash to exit, then SIGKILL for what is left)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(0.1)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def normalise(lines):
    lines = [line.rstrip() for line in lines]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_output(expected_lines, actual_text):
    """None when the output matches; else (index of the expected line or None, expected, actual)."""
    expected = normalise(expected_lines)
    offset = next((k for k, line in enumerate(expected_lines) if line.strip()), 0)
    actual = normalise(actual_text.split("\n"))
    patterns = [None if line.strip() == "…" else re.compile(".*".join(map(re.escape, line.split("…"))))
                for line in expected]
    e, a = len(expected), len(actual)
    # reach[i][j]: expected[:i] matches actual[:j].
    reach = [[False] * (a + 1) for _ in range(e + 1)]
    reach[0][0] = True
    for i in range(e + 1):
        for j in range(a + 1):
            if not reach[i][j] or i == e:
                continue
            if patterns[i] is None:
                reach[i + 1][j] = True
                if j < a:
                    reach[i][j + 1] = True
            elif j < a and patterns[i].fullmatch(actual[j]):
                reach[i + 1][j + 1] = True
    if reach[e][a]:
        return None
    i = max(x for x in range(e + 1) if any(reach[x]))
    ends = [y for y in range(a + 1) if reach[i][y]]
    j = max((y for y in ends if y < a), default=a)
    got = actual[j] if j < a else "(end of output)"
    if i == e:
        return None, "(end of expected output)", got
    return offset + i, expected[i], got


def indent(text, prefix="    "):
    return "\n".join(prefix + line for line in text.split("\n"))


def tail(text, n):
    lines = text.rstrip().split("\n")
    return "\n".join(lines[-n:])


def display(path):
    path = Path(path)
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------------- the shell

SUBCOMMAND_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
LINK_DESTINATION = re.compile(r"\]\([^)]*\)|<[A-Za-z/][^>]*>")
FLAG_WORD = re.compile(r"^[\[(]*(--[A-Za-z0-9][A-Za-z0-9-]*)")
PROSE_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
PREFIX_WORDS = {"!", "{", "}", "if", "then", "do", "else", "elif", "while", "until", "time", "exec", "nohup",
                "command", "builtin", "eval"}
# Wrappers whose options come before the command; the short options here take a value.
WRAPPERS = {"sudo": {"-u", "-g", "-C", "-D", "-p", "-R", "-T", "-U", "-h"}, "env": {"-u", "-C", "-S"},
            "timeout": {"-s", "-k"}, "nice": {"-n"}}
OPERATORS = ("&&", "||", ";;", "|&", "|", ";", "&", "(", ")", "`")


@dataclasses.dataclass
class Tok:
    kind: str  # "word" or "op" (an operator; "redir" for a redirection)
    text: str
    line: int


def logical_lines(fence):
    """(first line, tokens) of each logical line of a shell block; heredoc bodies skipped."""
    body, k = fence.body, 0
    while k < len(body):
        first = fence.body_start + k
        parts, offsets = [], []  # offsets: (start offset in the joined text, line number)
        text = ""
        while True:
            line = body[k]
            if not parts:
                line = re.sub(r"^\s*\$\s+", "", line)
            offsets.append((len(text), fence.body_start + k))
            k += 1
            if line.endswith("\\") and not line.endswith("\\\\") and k < len(body):
                text += line[:-1] + " "
                parts.append(line)
                continue
            text += line
            break

        def line_of(offset, offsets=offsets):
            return max(ln for start, ln in offsets if start <= offset)

        for delimiter in re.findall(r"(?<!<)<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?", text):
            while k < len(body) and body[k].strip() != delimiter:
                k += 1
            k += 1
        yield first, lex(text, line_of)


def lex(text, line_of):
    """Splits shell text into words (quotes removed) and operators."""
    tokens, buf, started, start = [], [], False, 0
    resumed = False  # the word is the rest of a double-quoted word after a "$(…)" in it
    quote, stack = None, []
    i, n = 0, len(text)

    def flush(keep_empty=True):
        nonlocal buf, started, resumed
        if started and (buf or (keep_empty and not resumed)):
            tokens.append(Tok("word", "".join(buf), line_of(start)))
        buf, started, resumed = [], False, False

    def begin():
        nonlocal started, start
        if not started:
            started, start = True, i

    while i < n:
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                buf.append(c)
            i += 1
            continue
        if quote == '"':
            if c == '"':
                quote = None
                i += 1
            elif c == "\\" and i + 1 < n:
                buf.append(text[i + 1])
                i += 2
            elif text.startswith("$(", i) and not text.startswith("$((", i):
                flush(keep_empty=False)  # "$(…)": the substitution's words, no empty word
                stack.append('"')
                quote = None
                tokens.append(Tok("op", "$(", line_of(i)))
                i += 2
            else:
                buf.append(c)
                i += 1
            continue
        if c in " \t\n":
            flush()
            i += 1
        elif c == "#" and not started:
            break
        elif c == "\\":
            begin()
            buf.append(text[i + 1] if i + 1 < n else "")
            i += 2
        elif c in "'\"":
            begin()
            quote = c
            i += 1
        elif text.startswith("$(", i) and not text.startswith("$((", i):
            flush()
            stack.append(None)
            tokens.append(Tok("op", "$(", line_of(i)))
            i += 2
        elif c == ")" and stack:
            flush()
            quote = stack.pop()
            if quote:
                started, start, resumed = True, i, True  # the rest of the double-quoted word
            tokens.append(Tok("op", ")", line_of(i)))
            i += 1
        elif c in "<>" or text.startswith("&>", i):
            if started and buf and "".join(buf).isdigit():
                buf, started = [], False  # a file descriptor: 2>
            flush()
            j = i + 1
            while j < n and text[j] in "<>&|-":
                j += 1
            tokens.append(Tok("op", "redir", line_of(i)))
            i = j
        else:
            for op in OPERATORS:
                if text.startswith(op, i):
                    flush()
                    tokens.append(Tok("op", op, line_of(i)))
                    i += len(op)
                    break
            else:
                begin()
                buf.append(c)
                i += 1
    flush()
    return tokens


def simple_commands(tokens):
    """The word lists of the simple commands (operators split them; redirection targets go)."""
    words, skip = [], False
    for tok in tokens:
        if tok.kind == "op":
            if tok.text == "redir":
                skip = True
                continue
            if words:
                yield words
            words = []
            continue
        if skip:
            skip = False
            continue
        words.append(tok)
    if words:
        yield words


def find_invocation(words):
    """(taskserver's arguments, forced subcommand path or None) when the simple command runs
    taskserver; None otherwise."""
    i = 0
    while i < len(words):
        word = words[i].text
        if ASSIGNMENT.match(word) or word in PREFIX_WORDS:
            i += 1
            continue
        if word in WRAPPERS:
            takes_value = WRAPPERS[word]
            i += 1
            while i < len(words) and (words[i].text.startswith("-") or ASSIGNMENT.match(words[i].text)):
                i += 2 if words[i].text in takes_value else 1
            if word == "timeout" and i < len(words):
                i += 1  # the duration
            continue
        if word == "swift" and i + 1 < len(words) and words[i + 1].text == "run":
            for j in range(i + 2, len(words)):
                if words[j].text == "taskserver":
                    return words[j + 1:], None
            return None
        if word == "make":
            rest = [w.text for w in words[i + 1:]]
            for w in words[i + 1:]:
                if w.text.startswith("ARGS=") and "run" in rest:
                    return [Tok("word", x, w.line) for x in w.text[len("ARGS="):].split()], ["serve"]
            return None
        if word == "taskserver" or word.endswith("/taskserver"):
            return words[i + 1:], None
        return None
    return None


# ------------------------------------------------------------------------------------ the CLI

class Command:
    def __init__(self, name):
        self.name = name
        self.flags = set()
        self.children = {}
        self.default = None
        self.positionals = False

    def walk(self, path=()):
        yield path, self
        for name, child in self.children.items():
            if child.name == name:
                yield from child.walk(path + (name,))

    def accepts_positionals(self, root):
        if self.positionals:
            return True
        return self is root and self.default in self.children and self.children[self.default].positionals


class CLI(Command):
    def allowed(self, path):
        """The long flags a command line with this subcommand path may use."""
        node, flags = self, set(self.flags)
        for name in path:
            node = node.children[name]
            flags |= node.flags
        if not path and self.default in self.children:
            flags |= self.children[self.default].flags
        return flags

    @property
    def all_flags(self):
        if not hasattr(self, "_all"):
            self._all = set().union(*(node.flags for _, node in self.walk()))
        return self._all


def run_binary(binary, args, timeout=20):
    try:
        proc = subprocess.run([str(binary), *args], check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=without_taskserver_env())
    except subprocess.TimeoutExpired:
        return None
    return proc


def without_taskserver_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("TASKSERVER_")}


def load_cli(binary):
    """The binary's command tree: from --experimental-dump-help (which names no alias and no
    default subcommand: those come from the SUBCOMMANDS section of each group's --help), else
    from the --help texts alone."""
    proc = run_binary(binary, ["--experimental-dump-help"])
    cli = None
    if proc is not None and proc.returncode == 0:
        try:
            cli = from_dump(json.loads(proc.stdout)["command"], CLI)
        except (ValueError, KeyError, TypeError):
            cli = None
    if cli is not None:
        for path, node in list(cli.walk()):
            if node.children:
                add_aliases(binary, path, node)
    else:
        cli = from_help(binary, [], CLI)
    if cli is None:
        raise SystemExit(f"check-docs: cannot read the command tree of {binary}")
    probe_builtins(binary, cli)
    return cli


def help_subcommands(binary, path):
    """[(names, is default)] of the SUBCOMMANDS section of `BIN PATH… --help` (None if it fails)."""
    proc = run_binary(binary, [*path, "--help"])
    if proc is None or proc.returncode != 0:
        return None
    found, section = [], None
    for line in proc.stdout.split("\n"):
        m = HELP_SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        if section != "SUBCOMMANDS" or not re.match(r"^  \S", line) or line.strip().startswith("See '"):
            continue
        left = re.split(r"\s{2,}", line.strip())[0]
        names = [x.strip() for x in left.replace("(default)", "").split(",") if x.strip()]
        if names:
            found.append((names, "(default)" in left))
    return found


def add_aliases(binary, path, node):
    for names, default in help_subcommands(binary, path) or []:
        child = next((node.children[n] for n in names if n in node.children), None)
        if child is None:
            continue
        for name in names:
            node.children.setdefault(name, child)
        if default:
            node.default = child.name


def from_dump(info, cls=Command):
    node = cls(info["commandName"])
    for arg in info.get("arguments") or []:
        if arg.get("kind") == "positional":
            node.positionals = True
        for name in arg.get("names") or []:
            if name.get("kind") == "long":
                node.flags.add("--" + name["name"])
    for sub in info.get("subcommands") or []:
        child = from_dump(sub)
        node.children[child.name] = child
        for alias in sub.get("aliases") or []:
            node.children[alias] = child
    node.default = info.get("defaultSubcommand")
    return node


HELP_SECTION = re.compile(r"^([A-Z][A-Z0-9 ]*):(\s|$)")


def from_help(binary, path, cls=Command):
    """A command from `BIN PATH… --help`: the long flags of its option sections, whether it has
    ARGUMENTS, and its subcommands (recursively)."""
    proc = run_binary(binary, [*path, "--help"])
    if proc is None or proc.returncode != 0:
        return None
    node = cls(path[-1] if path else Path(binary).name)
    section = None
    for line in proc.stdout.split("\n"):
        m = HELP_SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        if section in (None, "OVERVIEW", "USAGE", "SUBCOMMANDS") or not line.startswith("  "):
            continue
        left = re.split(r"\s{2,}", line.strip())[0]
        if section == "ARGUMENTS":
            node.positionals = True
        elif left.startswith("-"):
            left = re.sub(r"--\[no-\]([\w-]+)", r"--\1 --no-\1", left)
            node.flags.update(re.findall(r"--[A-Za-z0-9][\w-]*", left))
    for names, default in help_subcommands(binary, path) or []:
        if names[0] == "help":
            continue
        child = from_help(binary, [*path, names[0]])
        if child is None:
            continue
        for name in names:
            node.children[name] = child
        if default:
            node.default = names[0]
    return node


def probe_builtins(binary, cli):
    """Adds argument-parser's built-in flags to the commands whose command line accepts them
    (exit status 0). Each is probed on the root and on the deepest command first (in parallel:
    a debug binary takes 0.1-0.4 s a run); accepted by both, it is accepted on every command
    (argument-parser looks for it before it dispatches); otherwise every command is probed."""
    commands = list(cli.walk())
    deepest = max(commands, key=lambda item: len(item[0]))

    def probe(targets):
        runs = [(path, node, flag) for path, node in targets for flag in BUILTIN_FLAGS if flag not in node.flags]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 2)) as pool:
            results = pool.map(lambda run: run_binary(binary, [*run[0], run[2]] + (
                ["bash"] if run[2] == "--generate-completion-script" else []), timeout=20), runs)
            return {(path, flag) for (path, _, flag), proc in zip(runs, results, strict=True)
                    if proc is not None and proc.returncode == 0}

    samples = [commands[0], deepest]
    accepted = probe(samples)
    for flag in BUILTIN_FLAGS:
        everywhere = all((path, flag) in accepted or flag in node.flags for path, node in samples)
        if everywhere:
            for _, node in commands:
                node.flags.add(flag)
    rest = [(path, node) for path, node in commands if (path, node) not in samples]
    if rest and any(flag not in node.flags for _, node in rest for flag in BUILTIN_FLAGS):
        accepted |= probe(rest)
    for path, node in commands:
        node.flags.update(flag for flag in BUILTIN_FLAGS if (path, flag) in accepted)


# ----------------------------------------------------------------------------------- running

def default_files():
    files = [REPO / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md")) if (REPO / "docs").is_dir() else []
    files.append(REPO / "examples" / "README.md")
    return [f for f in files if f.exists() and FIXTURES not in f.resolve().parents]


def check(binary, cli, files, out=sys.stdout, quiet=False):
    """Checks `files`; returns the Checker (failures, counts)."""
    checker = Checker(cli, binary)
    times = []
    for path in files:
        before = len(checker.failures)
        started = time.monotonic()
        checker.check_page(path)
        times.append((display(path), time.monotonic() - started, len(checker.failures) - before))
    if not quiet:
        for file, line, message in checker.failures:
            print(f"{file}:{line}: {message}", file=out)
        if checker.failures:
            print(file=out)
        for file, seconds, failed in times:
            print(f"  {seconds:6.2f} s  {file}" + (f"  ({failed} failure(s))" if failed else ""), file=out)
        c = checker.counts
        print(f"check-docs: {c['files']} files, {c['links']} links checked, {c['flags']} flags checked, "
              f"{c['blocks']} runnable blocks run, {c['outputs']} outputs compared: "
              f"{len(checker.failures) or 'no'} failure(s)", file=out)
    return checker


# ---------------------------------------------------------------------------------- self-test

UNIT_CASES = {
    "slug": [
        ("Running it", "running-it"),
        ("Outbound HTTP: `http` tasks and webhooks", "outbound-http-http-tasks-and-webhooks"),
        ("Redrive: run a failed job again", "redrive-run-a-failed-job-again"),
        ("Many at once: after an outage", "many-at-once-after-an-outage"),
        ("Queue rules: urgent work first, one import per customer, 100 calls a second",
         "queue-rules-urgent-work-first-one-import-per-customer-100-calls-a-second"),
        ("`--max-connections` and [links](x.md)", "--max-connections-and-links"),
        ("Ünïcode façade — ok?", "ünïcode-façade--ok"),
        ("snake_case & _emphasis_ 🚀", "snake_case--emphasis-"),
    ],
    "output": [
        (["a", "b"], "a\nb\n", True),
        (["", "a  ", ""], "\n\na\n\n", True),
        (["a", "…", "z"], "a\nz\n", True),
        (["a", "…", "z"], "a\nb\nc\nz\n", True),
        (["a", "…", "c", "z"], "a\nc\nb\nc\nz\n", True),
        (['{"id": "…", "state": "succeeded"}'], '{"id": "j_1", "state": "succeeded"}', True),
        (["a", "b"], "a\nc\n", False),
        (["a"], "a\nb\n", False),
        (["a", "…"], "", False),
    ],
    "shell": [
        ("taskserver serve --memory --port 0", [["taskserver", "serve", "--memory", "--port", "0"]]),
        ("X=1 sudo -u ts ./bin/taskserver submit a.json --wait | jq .id && echo ok # --nope",
         [["X=1", "sudo", "-u", "ts", "./bin/taskserver", "submit", "a.json", "--wait"], ["jq", ".id"],
          ["echo", "ok"]]),
        ('id=$(taskserver submit "x y.json" 2>/dev/null)', [["id="], ["taskserver", "submit", "x y.json"]]),
        ("echo \"$(taskserver get $id)\" >&2; cat <<<'--x'", [["echo"], ["taskserver", "get", "$id"], ["cat"]]),
    ],
}


def unit_tests():
    problems = []
    for text, want in UNIT_CASES["slug"]:
        got = slug(heading_text(text))
        if got != want:
            problems.append(f"slug({text!r}) = {got!r}, want {want!r}")
    for expected, actual, want in UNIT_CASES["output"]:
        got = compare_output(expected, actual) is None
        if got != want:
            problems.append(f"output {expected!r} vs {actual!r}: match={got}, want {want}")
    for text, want in UNIT_CASES["shell"]:
        got = [[w.text for w in words] for words in simple_commands(lex(text, lambda offset: 1))]
        if got != want:
            problems.append(f"shell {text!r}: {got!r}, want {want!r}")
    return problems


def self_test(binary, cli):
    wrong = [f"unit: {p}" for p in unit_tests()]
    print(f"self-test: {sum(map(len, UNIT_CASES.values()))} unit cases, {len(wrong)} wrong")
    pages = sorted(p for p in FIXTURES.glob("*.md") if p.name.startswith(("good", "bad-")))
    if not any(p.name.startswith("good") for p in pages) or not any(p.name.startswith("bad-") for p in pages):
        wrong.append(f"no good*.md and bad-*.md fixtures in {display(FIXTURES)}")
    for page in pages:
        started = time.monotonic()
        checker = check(binary, cli, [page], quiet=True)
        got = [(line, message) for _, line, message in checker.failures]
        expected = []
        for k, raw in enumerate(page.read_text(encoding="utf-8").split("\n"), start=1):
            m = re.match(r"^\s*<!--\s*expect-failure:\s*(\d+):\s*(.*?)\s*-->\s*$", raw)
            if m:
                expected.append((int(m.group(1)), m.group(2), k))
        problems = []
        if page.name.startswith("good") and expected:
            problems.append("a good page declares expected failures")
        if page.name.startswith("bad-") and not expected:
            problems.append("a bad page declares no <!-- expect-failure: LINE: TEXT -->")
        matched = set()
        for line, text, k in expected:
            hits = [i for i, (gl, gm) in enumerate(got) if gl == line and text in gm]
            if not hits:
                problems.append(f"expected a failure at line {line} containing {text!r} (declared at line {k})")
            matched.update(hits)
        for i, (gl, gm) in enumerate(got):
            if i not in matched:
                problems.append(f"unexpected failure: {gl}: {gm}")
        verdict = "fails" if got else "passes"
        status = "ok" if not problems else "WRONG"
        print(f"  {status:5}  {display(page)} {verdict} ({len(got)} failure(s), "
              f"{time.monotonic() - started:.2f} s)")
        for p in problems:
            print(indent(p, "         "))
        wrong += [f"{display(page)}: {p}" for p in problems]
    print(f"self-test: {'passed' if not wrong else f'{len(wrong)} wrong verdict(s)'}")
    return 1 if wrong else 0


def main(argv):
    parser = argparse.ArgumentParser(
        prog="check-docs.py", description="Check TaskServer's Markdown docs (see the module docstring).",
        usage="%(prog)s [--self-test] PATH/TO/taskserver [FILES...]")
    parser.add_argument("--self-test", action="store_true", help="check the checker on Tests/docs/")
    parser.add_argument("binary", help="the taskserver binary under test")
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/**/*.md, "
                                                 "examples/README.md)")
    args = parser.parse_args(argv)
    binary = Path(os.path.abspath(args.binary))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        parser.error(f"not an executable file: {args.binary}")
    if args.self_test and args.files:
        parser.error("--self-test takes no FILES")
    cli = load_cli(binary)
    if args.self_test:
        return self_test(binary, cli)
    files = [Path(os.path.abspath(f)) for f in args.files] if args.files else default_files()
    missing = [f for f in files if not f.is_file()]
    if missing:
        parser.error("no such file: " + ", ".join(map(display, missing)))
    checker = check(binary, cli, files)
    return 1 if checker.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
